package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// ClusterStatus is a master's view of the cluster (catena status; its
// JSON, with the field names of the tags, is what catena status --json
// prints and the master's /status.json serves).
type ClusterStatus struct {
	// Masters lists the master's members; Leader is the one that leads,
	// as the answering member believes ("" if none).
	Masters []string `json:"masters"`
	Leader  string   `json:"leader"`
	// Volumes holds every volume's configuration, by volume.
	Volumes []VolumeConfig `json:"volumes"`
	// Servers holds what the master knows of each server.
	Servers []ServerStatus `json:"servers"`
	// Keyspaces holds every keyspace, the default one first.
	Keyspaces []Keyspace `json:"keyspaces"`
}

// VolumeConfig is one volume's chain.
type VolumeConfig struct {
	Volume uint32 `json:"volume"`
	// Epoch numbers the volume's configurations; it grows on every change.
	Epoch uint64 `json:"epoch"`
	// Chain lists the members from head to tail.
	Chain []string `json:"chain"`
	// Joining is a server being added at the tail ("" if none).
	Joining string `json:"joining"`
}

// Role returns what server is in the volume's chain: "head", "middle",
// "tail", "head+tail" (a chain of one), "joining", or "" if none.
func (v VolumeConfig) Role(server string) string {
	i := slices.Index(v.Chain, server)
	switch {
	case server == "":
		return ""
	case v.Joining == server:
		return "joining"
	case i < 0:
		return ""
	case len(v.Chain) == 1:
		return "head+tail"
	case i == 0:
		return "head"
	case i == len(v.Chain)-1:
		return "tail"
	}
	return "middle"
}

// ServerStatus is the master's view of one server.
type ServerStatus struct {
	Addr  string `json:"addr"`
	Alive bool   `json:"alive"`
	// Incarnation counts the server's process starts.
	Incarnation uint64 `json:"incarnation"`
	// Volumes is what the server last reported of each volume it holds.
	Volumes []ReplicaStatus `json:"volumes"`
}

// ReplicaStatus is one server's replica of one volume, as last reported.
type ReplicaStatus struct {
	Volume uint32 `json:"volume"`
	Epoch  uint64 `json:"epoch"`
	// Applied is the sequence number of the last update the replica
	// applied; Committed the highest it knows the tail processed.
	Applied   uint64 `json:"applied"`
	Committed uint64 `json:"committed"`
}

// Ready reports whether the status shows each of servers alive and every
// chain member running its volume's configuration (reporting the volume's
// epoch), or else what is missing, for a person to read. catena dev waits
// for it before announcing a cluster. A server still joining a chain
// does not make the status unready: check VolumeConfig.Joining for that.
func (s *ClusterStatus) Ready(servers []string) (bool, string) {
	if len(s.Volumes) == 0 {
		return false, "no configuration"
	}
	epochs := map[string]map[uint32]uint64{}
	for _, srv := range s.Servers {
		if !srv.Alive {
			continue
		}
		epochs[srv.Addr] = map[uint32]uint64{}
		for _, v := range srv.Volumes {
			epochs[srv.Addr][v.Volume] = v.Epoch
		}
	}
	var silent []string
	for _, addr := range servers {
		if epochs[addr] == nil {
			silent = append(silent, addr)
		}
	}
	if len(silent) > 0 {
		return false, "the master has not heard from " + strings.Join(silent, ", ")
	}
	for _, c := range s.Volumes {
		for _, id := range c.Chain {
			if epochs[id][c.Volume] != c.Epoch {
				return false, fmt.Sprintf("%s does not run volume %d's configuration (epoch %d) yet", id, c.Volume, c.Epoch)
			}
		}
	}
	return true, ""
}

type statusFrom struct {
	from  wire.NodeID
	reply *wire.StatusReply
}

// Status returns the master's view of the cluster: the leader's, or if
// no leader answers within an attempt, any member's.
func (c *Client) Status(ctx context.Context) (*ClusterStatus, error) {
	w := make(chan statusFrom, 16)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.statusWaiters = append(c.statusWaiters, w)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.statusWaiters = slices.DeleteFunc(c.statusWaiters, func(x chan statusFrom) bool { return x == w })
		c.mu.Unlock()
	}()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	var anyReply *wire.StatusReply
	for {
		c.mu.Lock()
		masters := c.core.Masters()
		c.mu.Unlock()
		for _, m := range masters {
			c.tr.Send(wire.Envelope{To: m, Msg: &wire.StatusRequest{}})
		}
		timeout := time.After(c.opts.AttemptTimeout)
	wait:
		for {
			select {
			case s := <-w:
				if s.reply.Leader == s.from {
					return statusOf(s.reply), nil
				}
				anyReply = s.reply
			case <-timeout:
				if anyReply != nil {
					return statusOf(anyReply), nil
				}
				break wait
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: master did not answer: %w", ErrUnavailable, ctx.Err())
			case <-c.done:
				return nil, ErrClosed
			}
		}
	}
}

func statusOf(r *wire.StatusReply) *ClusterStatus {
	s := &ClusterStatus{Leader: string(r.Leader), Keyspaces: keyspacesOf(r.Keyspaces)}
	for _, m := range r.Masters {
		s.Masters = append(s.Masters, string(m))
	}
	for _, cfg := range r.Configs {
		v := VolumeConfig{Volume: uint32(cfg.Volume), Epoch: uint64(cfg.Epoch), Joining: string(cfg.Joining)}
		for _, id := range cfg.Chain {
			v.Chain = append(v.Chain, string(id))
		}
		s.Volumes = append(s.Volumes, v)
	}
	for _, srv := range r.Servers {
		st := ServerStatus{Addr: string(srv.ID), Alive: srv.Alive, Incarnation: srv.Incarnation}
		for _, vs := range srv.Volumes {
			st.Volumes = append(st.Volumes, ReplicaStatus{Volume: uint32(vs.Volume), Epoch: uint64(vs.Epoch), Applied: uint64(vs.AppliedSN), Committed: uint64(vs.CommittedSN)})
		}
		s.Servers = append(s.Servers, st)
	}
	return s
}
