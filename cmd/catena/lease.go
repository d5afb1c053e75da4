package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/cli"
)

const leaseSynopsis = "catena lease list | grant TTL | keepalive ID | revoke ID [flags]"

const leaseDescription = `lease shows and manages leases: keys bound to a holder's liveness
(docs/operations.md, "Leases and locks"). list prints each lease alive,
its TTL, the time left before its deadline and its keys; grant makes a
lease of TTL (1s to 720h) and prints its ID; keepalive renews lease ID
once (its keys with it); revoke ends it now, deleting its keys. Keys are
bound to a lease with the Go client (client.WithLease), which also runs
the renewals (KeepAliveLoop).`

// runLease runs catena lease.
func runLease(_ string, args []string, _ io.Reader, stdout io.Writer) error {
	verbs := []string{"list", "grant", "keepalive", "revoke"}
	if len(args) > 0 && cli.IsHelp(args[0]) {
		args = []string{"list", "-h"}
	}
	if len(args) == 0 || !slices.Contains(verbs, args[0]) {
		return cli.UsageErrorf("want %s (usage: %s)", strings.Join(verbs, ", "), leaseSynopsis)
	}
	verb := args[0]
	fs := cli.NewFlagSet("lease", leaseSynopsis, leaseDescription)
	cluster := registerClientFlags(fs)
	rest, err := cli.ParseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	want := map[string]int{"list": 0, "grant": 1, "keepalive": 1, "revoke": 1}[verb]
	if len(rest) != want {
		return cli.UsageErrorf("lease %s takes %d argument(s), got %d (usage: %s)", verb, want, len(rest), leaseSynopsis)
	}
	var ttl time.Duration
	var id client.LeaseID
	switch verb {
	case "grant":
		if ttl, err = time.ParseDuration(rest[0]); err != nil || ttl < client.LeaseTTLMin || ttl > client.LeaseTTLMax {
			return cli.UsageErrorf("TTL %q: want a duration from %v to %v", rest[0], client.LeaseTTLMin, client.LeaseTTLMax)
		}
	case "keepalive", "revoke":
		if id, err = client.ParseLeaseID(rest[0]); err != nil {
			return cli.UsageErrorf("%v", err)
		}
	}
	ctx, cancel := cluster.context()
	defer cancel()
	c, err := cluster.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	switch verb {
	case "grant":
		id, deadline, err := c.Grant(ctx, ttl)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s ttl %v deadline %s\n", id, ttl, deadline.UTC().Format(time.RFC3339Nano))
		return err
	case "keepalive":
		deadline, err := c.KeepAlive(ctx, id)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s deadline %s\n", id, deadline.UTC().Format(time.RFC3339Nano))
		return err
	case "revoke":
		return c.Revoke(ctx, id)
	}
	leases, err := c.Leases(ctx)
	if err != nil {
		return err
	}
	slices.SortFunc(leases, func(a, b client.LeaseInfo) int { return strings.Compare(a.ID.String(), b.ID.String()) })
	now := time.Now()
	for _, l := range leases {
		keys := slices.Clone(l.Keys)
		slices.Sort(keys)
		left := max(0, l.Deadline.Sub(now)).Round(time.Millisecond)
		if _, err := fmt.Fprintf(stdout, "%s ttl %v left %v keys %d %s\n", l.ID, l.TTL, left, len(keys), strings.Join(keys, " ")); err != nil {
			return err
		}
	}
	return nil
}
