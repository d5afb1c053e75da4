package client

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// versionFrom is a master member's VersionReply and who sent it.
type versionFrom struct {
	from  wire.NodeID
	reply *wire.VersionReply
}

// MemberVersion is what one master member runs and speaks.
type MemberVersion struct {
	Addr    string `json:"addr"`
	Release string `json:"release"`
	// MinProtocol and MaxProtocol bound the protocol versions it speaks.
	MinProtocol uint32 `json:"min_protocol"`
	MaxProtocol uint32 `json:"max_protocol"`
}

// Versions is what a cluster runs: the protocol version it runs at, and
// what each master member and server speaks (docs/upgrades.md).
type Versions struct {
	ClusterVersion uint32 `json:"cluster_version"`
	Leader         string `json:"leader"`
	// Masters holds the members that answered; Missing the ones that
	// did not within the request's time.
	Masters []MemberVersion `json:"masters"`
	Missing []string        `json:"missing,omitempty"`
	// Servers are as the leader last heard them.
	Servers []ServerStatus `json:"servers"`
}

// Versions asks every master member what it speaks, and the leader what
// every server does.
func (c *Client) Versions(ctx context.Context) (*Versions, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	out := &Versions{ClusterVersion: max(1, st.ClusterVersion), Leader: st.Leader, Servers: st.Servers}
	answered := map[string]bool{}
	attempt, cancel := context.WithTimeout(ctx, max(c.opts.AttemptTimeout, time.Second))
	defer cancel()
	err = askMasters(attempt, c, &wire.VersionRequest{}, &c.versionWaiters, "master did not answer", func(r versionFrom) (bool, error) {
		if answered[string(r.from)] {
			return false, nil
		}
		answered[string(r.from)] = true
		out.Masters = append(out.Masters, MemberVersion{Addr: string(r.from), Release: r.reply.Release,
			MinProtocol: r.reply.MinProtocol, MaxProtocol: r.reply.MaxProtocol})
		out.ClusterVersion = max(out.ClusterVersion, r.reply.ClusterVersion)
		return len(answered) == len(st.Masters), nil
	}, nil)
	if err != nil && len(out.Masters) == 0 {
		return nil, err
	}
	for _, m := range st.Masters {
		if !answered[m] {
			out.Missing = append(out.Missing, m)
		}
	}
	slices.SortFunc(out.Masters, func(a, b MemberVersion) int { return cmp.Compare(a.Addr, b.Addr) })
	return out, nil
}

// FinalizeUpgrade raises the cluster's protocol version to version (0:
// the newest every master member speaks), after every process was
// upgraded: behaviours the previous release cannot follow are used from
// then on, and processes of releases that do not speak it stop. It
// checks each master member itself, and the leader checks the servers;
// a refusal (a process that does not speak it, a member that did not
// answer, a server down in a chain) is ErrRefused, saying which. Only an
// admin may. It returns the cluster version once raised.
func (c *Client) FinalizeUpgrade(ctx context.Context, version uint32) (uint32, error) {
	v, err := c.Versions(ctx)
	if err != nil {
		return 0, err
	}
	if len(v.Missing) > 0 {
		return 0, fmt.Errorf("%w: master members %v did not say what they speak: every member must answer before finalizing", ErrRefused, v.Missing)
	}
	if version == 0 {
		for i, m := range v.Masters {
			if i == 0 || m.MaxProtocol < version {
				version = m.MaxProtocol
			}
		}
	}
	for _, m := range v.Masters {
		if version < m.MinProtocol || version > m.MaxProtocol {
			return 0, fmt.Errorf("%w: master member %s (release %s) speaks protocol %d to %d, not %d: upgrade it first",
				ErrRefused, m.Addr, m.Release, m.MinProtocol, m.MaxProtocol, version)
		}
	}
	var raised uint32
	err = askMasters(ctx, c, &wire.VersionRequest{Finalize: version}, &c.versionWaiters, "no master leader answered", func(r versionFrom) (bool, error) {
		switch {
		case r.reply.Err != "":
			return true, fmt.Errorf("%w: %s", ErrRefused, r.reply.Err)
		case r.reply.ClusterVersion < version:
			return false, nil // a member's late answer to the query above
		}
		raised = r.reply.ClusterVersion
		return true, nil
	}, nil)
	return raised, err
}
