package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/catena-kv/catena/client"
)

// runKV runs put, get, del and status against a cluster.
func runKV(cmd string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	masterAddr := fs.String("master", defaultMasterAddr, "the master's address (any member's, for a replicated master)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	want := map[string]int{"put": 2, "get": 1, "del": 1, "status": 0}[cmd]
	if fs.NArg() != want {
		return fmt.Errorf("want %d argument(s), got %d (usage: catena put KEY VALUE | get KEY | del KEY | status)", want, fs.NArg())
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := client.Dial(ctx, *masterAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	switch cmd {
	case "put":
		if err := c.Put(ctx, fs.Arg(0), []byte(fs.Arg(1))); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "OK")
	case "get":
		value, found, err := c.Get(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		if !found {
			return errNotFound
		}
		fmt.Fprintf(stdout, "%s\n", value)
	case "del":
		existed, err := c.Delete(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		if !existed {
			return errNotFound
		}
		fmt.Fprintln(stdout, "OK")
	case "status":
		s, err := c.Status(ctx)
		if err != nil {
			return err
		}
		printStatus(stdout, *masterAddr, s)
	}
	return nil
}

var errNotFound = errors.New("not found")

// printStatus shows each volume's chain (or, with many volumes, how many
// volumes each server heads, is middle of, and tails) and each server's
// view.
func printStatus(w io.Writer, masterAddr string, s *client.ClusterStatus) {
	if len(s.Masters) > 1 {
		var members []string
		for _, m := range s.Masters {
			if m == s.Leader {
				members = append(members, m+" (leader)")
			} else {
				members = append(members, m)
			}
		}
		fmt.Fprintf(w, "masters %s\n", strings.Join(members, ", "))
	} else {
		fmt.Fprintf(w, "master %s\n", masterAddr)
	}
	roleIn := func(v uint32, server string) string {
		for _, c := range s.Volumes {
			if c.Volume == v {
				return c.Role(server)
			}
		}
		return ""
	}
	if len(s.Volumes) <= 4 {
		for _, c := range s.Volumes {
			joining := "-"
			if c.Joining != "" {
				joining = c.Joining
			}
			fmt.Fprintf(w, "volume %d  epoch %d  chain %s  joining %s\n", c.Volume, c.Epoch, strings.Join(c.Chain, " → "), joining)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SERVER\tALIVE\tINCARNATION\tVOLUME\tROLE\tEPOCH\tAPPLIED\tCOMMITTED")
		for _, srv := range s.Servers {
			if len(srv.Volumes) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t-\tspare\t-\t-\t-\n", srv.Addr, yesNo(srv.Alive), srv.Incarnation)
			}
			for _, v := range srv.Volumes {
				role := roleIn(v.Volume, srv.Addr)
				if role == "" {
					role = "none"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\n", srv.Addr, yesNo(srv.Alive), srv.Incarnation, v.Volume, role, v.Epoch, v.Applied, v.Committed)
			}
		}
		tw.Flush()
		return
	}
	joining := 0
	count := map[string]map[string]int{}
	for _, c := range s.Volumes {
		if c.Joining != "" {
			joining++
		}
		for _, id := range append(slices.Clone(c.Chain), c.Joining) {
			if id == "" {
				continue
			}
			if count[id] == nil {
				count[id] = map[string]int{}
			}
			count[id][c.Role(id)]++
		}
	}
	fmt.Fprintf(w, "%d volumes, %d extensions in progress\n", len(s.Volumes), joining)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tALIVE\tINCARNATION\tHEAD\tMIDDLE\tTAIL\tJOINING\tVOLUMES")
	for _, srv := range s.Servers {
		c := count[srv.Addr]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", srv.Addr, yesNo(srv.Alive), srv.Incarnation,
			c["head"]+c["head+tail"], c["middle"], c["tail"]+c["head+tail"], c["joining"], c["head"]+c["middle"]+c["tail"]+c["head+tail"])
	}
	tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
