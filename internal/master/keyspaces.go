package master

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Keyspaces (docs/adr/0010-causal-mode.md): the default keyspace (prefix
// "", the cluster's first Settings.Volumes volumes, chain length
// Settings.ReplicationFactor, strong unless Settings.DefaultK says
// causal) and the keyspaces created since, each with its own volumes
// numbered after the previous ones. They are part of the durable state
// (State.Keyspaces, the Raft log): a keyspace is created by one command
// that carries its chains, chosen by the leader, so every member applies
// the same configurations.

// KeyspaceVolumesMax bounds the volumes one keyspace may have.
const KeyspaceVolumesMax = 4096

// Bounds of a hierarchical keyspace's settings.
const (
	HierarchicalDepthMax = 16
	HierarchicalIdleMin  = 10 * wire.Millisecond
	HierarchicalIdleMax  = 60 * wire.Second
)

// defaultKeyspace is the default keyspace of a cluster with settings s.
func defaultKeyspace(s Settings) wire.Keyspace {
	ks := wire.Keyspace{Name: wire.DefaultKeyspace, ReplicationFactor: s.ReplicationFactor, Volumes: s.Volumes}
	if s.DefaultK > 0 {
		ks.Mode, ks.K = wire.ModeCausal, s.DefaultK
	}
	if s.DefaultHierarchical {
		ks.Mode, ks.PartitionDepth, ks.Relaxed = wire.ModeHierarchical, 1, s.DefaultRelaxed
	}
	ks.Sites = slices.Clone(s.DefaultSites)
	return ks
}

// Keyspaces returns every keyspace, the default one first.
func (m *Master) Keyspaces() []wire.Keyspace { return slices.Clone(m.keyspaces) }

// createdKeyspaces returns the keyspaces other than the default one.
func (m *Master) createdKeyspaces() []wire.Keyspace {
	if len(m.keyspaces) < 2 {
		return nil
	}
	return slices.Clone(m.keyspaces[1:])
}

// keyspaceOf returns the keyspace volume v belongs to.
func (m *Master) keyspaceOf(v wire.VolumeID) wire.Keyspace {
	for _, ks := range m.keyspaces {
		if ks.HasVolume(v) {
			return ks
		}
	}
	return m.keyspaces[0]
}

// volumeCount is the number of volumes of every keyspace.
func volumeCount(keyspaces []wire.Keyspace) int {
	n := 0
	for _, ks := range keyspaces {
		n += ks.Volumes
	}
	return n
}

// ValidateKeyspace reports why a keyspace cannot be created beside
// existing ones. exists is set when one with the same name and the same
// settings is there already (creating it again is a retry, not an error).
func ValidateKeyspace(existing []wire.Keyspace, k wire.Keyspace) (exists bool, err error) {
	var errs []error
	switch {
	case k.Name == "":
		errs = append(errs, errors.New("empty keyspace name"))
	case len(k.Name) > 64 || !validName(k.Name):
		errs = append(errs, fmt.Errorf("keyspace name %q: use up to 64 letters, digits, '-', '_' or '.'", k.Name))
	}
	if k.Prefix == "" {
		errs = append(errs, errors.New("empty prefix: only the default keyspace has it"))
	}
	switch k.Mode {
	case wire.ModeStrong:
		if k.K != 0 {
			errs = append(errs, fmt.Errorf("k=%d given for a strong keyspace (k is for causal ones)", k.K))
		}
	case wire.ModeCausal:
		if k.K < 1 || k.K > k.ReplicationFactor {
			errs = append(errs, fmt.Errorf("k=%d outside 1..t (t=%d)", k.K, k.ReplicationFactor))
		}
	case wire.ModeHierarchical:
		if k.K != 0 {
			errs = append(errs, fmt.Errorf("k=%d given for a hierarchical keyspace (k is for causal ones)", k.K))
		}
		if !strings.HasSuffix(k.Prefix, wire.PathSeparator) {
			errs = append(errs, fmt.Errorf("prefix %q of a hierarchical keyspace must end in %q: its keys are paths below it", k.Prefix, wire.PathSeparator))
		} else if err := wire.CheckPath(k.Prefix, false); err != nil {
			errs = append(errs, fmt.Errorf("prefix: %w", err))
		}
		if k.PartitionDepth < 1 || k.PartitionDepth > HierarchicalDepthMax {
			errs = append(errs, fmt.Errorf("partition depth %d outside 1..%d", k.PartitionDepth, HierarchicalDepthMax))
		}
		if k.Idle != 0 && (k.Idle < HierarchicalIdleMin || k.Idle > HierarchicalIdleMax) {
			errs = append(errs, fmt.Errorf("idle time %v outside %v..%v", k.Idle, HierarchicalIdleMin, HierarchicalIdleMax))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown mode %d", k.Mode))
	}
	if k.ReplicationFactor < 1 {
		errs = append(errs, fmt.Errorf("replication factor %d < 1", k.ReplicationFactor))
	}
	if k.Volumes < 1 || k.Volumes > KeyspaceVolumesMax {
		errs = append(errs, fmt.Errorf("%d volumes outside 1..%d", k.Volumes, KeyspaceVolumesMax))
	}
	for i, id := range k.Sites {
		if id == 0 || i > 0 && k.Sites[i-1] >= id {
			errs = append(errs, fmt.Errorf("sites %v: give distinct non-zero site ids in increasing order", k.Sites))
			break
		}
	}
	if len(k.Sites) > 1 && k.Mode == wire.ModeStrong {
		errs = append(errs, errors.New("a keyspace of several sites must be causal or hierarchical (strong chains across sites are not built)"))
	}
	if k.Mode != wire.ModeHierarchical && (k.PartitionDepth != 0 || k.Relaxed || k.Idle != 0) {
		errs = append(errs, fmt.Errorf("partition depth, relaxed durability and idle time are for hierarchical keyspaces, not %s ones", k.Mode))
	}
	if !k.Grace.Equal(wire.Override{}) || !k.Reassign.Equal(wire.Override{}) {
		errs = append(errs, errors.New("a keyspace is created without overrides (catena keyspace grace and reassign make them)"))
	}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	for _, o := range existing {
		if o.Name == k.Name {
			same := o.Prefix == k.Prefix && o.Mode == k.Mode && o.K == k.K &&
				o.ReplicationFactor == k.ReplicationFactor && o.Volumes == k.Volumes && slices.Equal(o.Sites, k.Sites) &&
				o.PartitionDepth == k.PartitionDepth && o.Relaxed == k.Relaxed && o.Idle == k.Idle
			if same {
				return true, nil
			}
			return false, fmt.Errorf("keyspace %q exists with other settings", k.Name)
		}
		if k.Overlaps(o) {
			return false, fmt.Errorf("prefix %q overlaps keyspace %q's prefix %q", k.Prefix, o.Name, o.Prefix)
		}
	}
	return false, nil
}

// validateKeyspaceSites checks a keyspace's sites against the cluster's:
// every one known, this site among them.
func (m *Master) validateKeyspaceSites(k wire.Keyspace) error {
	if len(k.Sites) == 0 {
		return nil
	}
	s := m.opts.Settings
	if s.Site == 0 {
		return fmt.Errorf("sites %v given, but this cluster is not part of a deployment of sites", k.Sites)
	}
	for _, id := range k.Sites {
		if !slices.ContainsFunc(s.Sites, func(st wire.Site) bool { return st.ID == id }) {
			var known []string
			for _, st := range s.Sites {
				known = append(known, fmt.Sprintf("%d %s", st.ID, st.Name))
			}
			return fmt.Errorf("site %d is unknown (sites: %s)", id, strings.Join(known, ", "))
		}
	}
	if !slices.Contains(k.Sites, s.Site) {
		return fmt.Errorf("sites %v leave out this site %d", k.Sites, s.Site)
	}
	return nil
}

func validName(s string) bool {
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}

// handleKeyspaceRequest creates a keyspace, or records an operator's
// override of one (leader only; admin): it checks the request, places a
// new keyspace's volumes on the live servers and proposes the command;
// the reply goes out when the command is applied.
func (m *Master) handleKeyspaceRequest(now wire.Time, from wire.NodeID, req *wire.KeyspaceRequest) {
	k := req.Create
	if !m.leading || m.canGrant != nil && !m.canGrant(now) {
		// Clients ask every member; the leader answers, unless no quorum
		// answered it lately: a leader cut off from the others may be
		// deposed already, and would answer from a state that lacks what
		// its successor applied (a split refused as if it had not
		// happened).
		return
	}
	name, what := k.Name, "create keyspace"
	switch {
	case req.Override != nil:
		name, what = req.Override.Keyspace, "override keyspace"
	case req.Split != "":
		name, what = req.Split, "split keyspace"
	}
	if err := authorizeAdmin(&m.auth, req.Caller); err != nil {
		m.deny(fmt.Sprintf("refused to %s %q for %s (certificate %q): %v", what, name, from, req.Caller.Name, err))
		m.send(from, &wire.KeyspaceReply{Err: err.Error()})
		return
	}
	if req.Override != nil {
		m.handleOverrideRequest(now, from, *req.Override)
		return
	}
	if req.Split != "" {
		m.handleSplitRequest(now, from, req.Split, k.Splits)
		return
	}
	exists, err := ValidateKeyspace(m.keyspaces, k)
	if err == nil {
		err = m.validateKeyspaceSites(k)
	}
	switch {
	case err != nil:
		m.send(from, &wire.KeyspaceReply{Err: err.Error()})
		return
	case exists:
		m.send(from, &wire.KeyspaceReply{Keyspaces: m.Keyspaces()})
		return
	}
	var live []wire.NodeID
	for _, id := range m.ring() {
		if st := m.servers[id]; st != nil && st.alive {
			live = append(live, id)
		}
	}
	if len(live) < k.ReplicationFactor {
		m.send(from, &wire.KeyspaceReply{Err: fmt.Sprintf("chain length %d needs as many live servers; %d are live", k.ReplicationFactor, len(live))})
		return
	}
	k.FirstVolume = wire.VolumeID(volumeCount(m.keyspaces))
	h := fnv.New64a()
	h.Write([]byte(k.Name))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(k.FirstVolume)))
	chains, err := placement.Initial(m.opts.Placement, live, k.Volumes, k.ReplicationFactor, rng)
	if err != nil {
		m.send(from, &wire.KeyspaceReply{Err: err.Error()})
		return
	}
	cmd := Command{Kind: CmdCreateKeyspace, Keyspace: &k, Chains: make(map[wire.VolumeID][]wire.NodeID, len(chains))}
	for v, chain := range chains {
		cmd.Chains[k.FirstVolume+v] = chain
	}
	m.awaitKeyspaceCommand(now, k.Name, from, cmd)
}

// awaitKeyspaceCommand proposes cmd about keyspace name, and has from
// answered once it is applied (answerKeyspaceWaiters).
func (m *Master) awaitKeyspaceCommand(now wire.Time, name string, from wire.NodeID, cmd Command) {
	if !slices.Contains(m.keyspaceWaiters[name], from) {
		m.keyspaceWaiters[name] = append(m.keyspaceWaiters[name], from)
	}
	m.submit(now, cmd)
}

// applyCreateKeyspace adds a keyspace and its volumes' first
// configurations (Fresh: their members hold nothing yet). A command that
// no longer fits (another keyspace took its name, prefix or volumes
// first) does nothing, and its requesters are told.
func (m *Master) applyCreateKeyspace(c Command) {
	k := *c.Keyspace
	exists, err := ValidateKeyspace(m.keyspaces, k)
	if err == nil && !exists && int(k.FirstVolume) != volumeCount(m.keyspaces) {
		err = fmt.Errorf("volumes from %d were taken meanwhile", k.FirstVolume)
	}
	if err == nil && !exists {
		m.keyspaces = append(m.keyspaces, k)
		for i := range k.Volumes {
			v := k.FirstVolume + wire.VolumeID(i)
			cfg := &wire.Config{Volume: v, Epoch: 1, Chain: slices.Clone(c.Chains[v]), Fresh: true, Mode: k.Mode, K: k.K, Sites: slices.Clone(k.Sites)}
			m.setConfig(cfg)
			if m.leading {
				for _, id := range cfg.Chain {
					m.send(id, &wire.NewConfig{Config: cfg.Clone()})
				}
			}
		}
	}
	m.answerKeyspaceWaiters(k.Name, err)
}

// answerKeyspaceWaiters answers, at the leader, the requests waiting for
// a command about keyspace name to be applied: with every keyspace, or
// with err.
func (m *Master) answerKeyspaceWaiters(name string, err error) {
	if !m.leading {
		return
	}
	reply := &wire.KeyspaceReply{Keyspaces: m.Keyspaces()}
	if err != nil {
		reply = &wire.KeyspaceReply{Err: err.Error()}
	}
	for _, to := range m.keyspaceWaiters[name] {
		m.send(to, reply)
	}
	delete(m.keyspaceWaiters, name)
}

// ValidateOverride checks an operator's override of a hierarchical
// keyspace at site self: the keyspace exists and is hierarchical; the
// generation is the keyspace's next of its kind; the sites are distinct
// sites of the keyspace in increasing order. A grace view (NFSv4 §2.3's
// grace period, after a majority of the keyspace's sites failed at
// once) keeps this site and a majority of the keyspace's sites; a
// reassignment is of a relaxed keyspace (in durable mode the sites take
// a removed site's keys over by themselves) and names other sites than
// this one. done: the request was applied already (a retry).
func ValidateOverride(existing []wire.Keyspace, r wire.OverrideRequest, self wire.SiteID) (done bool, err error) {
	i := slices.IndexFunc(existing, func(k wire.Keyspace) bool { return k.Name == r.Keyspace })
	if i < 0 {
		return false, fmt.Errorf("no keyspace %q", r.Keyspace)
	}
	k, want, have, what := existing[i], r.Override, existing[i].Grace, "grace"
	if r.Reassign {
		have, what = k.Reassign, "reassignment"
	}
	switch {
	case k.Mode != wire.ModeHierarchical:
		return false, fmt.Errorf("keyspace %q is %s: a %s is for hierarchical keyspaces", k.Name, k.Mode, what)
	case want.Equal(have):
		return true, nil
	case want.Generation != have.Generation+1:
		return false, fmt.Errorf("%s generation %d: keyspace %q is at generation %d (another %s came first; look again)", what, want.Generation, k.Name, have.Generation, what)
	case len(want.Sites) == 0:
		return false, fmt.Errorf("a %s names sites", what)
	}
	for i, s := range want.Sites {
		if !slices.Contains(k.Sites, s) || i > 0 && want.Sites[i-1] >= s {
			return false, fmt.Errorf("sites %v: give distinct sites of keyspace %q (%v) in increasing order", want.Sites, k.Name, k.Sites)
		}
	}
	switch {
	case r.Reassign && !k.Relaxed:
		return false, fmt.Errorf("keyspace %q is durable: its sites take a removed site's keys over by themselves; reassignment is for relaxed keyspaces", k.Name)
	case r.Reassign && slices.Contains(want.Sites, self):
		return false, fmt.Errorf("sites %v include this site (%d): reassign a site's keys at the other sites", want.Sites, self)
	case !r.Reassign && !slices.Contains(want.Sites, self):
		return false, fmt.Errorf("view %v leaves out this site (%d): force it at a site it keeps", want.Sites, self)
	case !r.Reassign && len(want.Sites) < len(k.Sites)/2+1:
		return false, fmt.Errorf("view %v is no majority of the keyspace's sites %v", want.Sites, k.Sites)
	}
	return false, nil
}

// handleOverrideRequest records an operator's override of a
// hierarchical keyspace (handleKeyspaceRequest checked the caller): the
// command is proposed, and the reply goes out once it is applied. The
// heads of the keyspace's volumes at this site then act on it
// (chain/rejoin.go).
func (m *Master) handleOverrideRequest(now wire.Time, from wire.NodeID, o wire.OverrideRequest) {
	done, err := ValidateOverride(m.keyspaces, o, m.opts.Settings.Site)
	switch {
	case err != nil:
		m.send(from, &wire.KeyspaceReply{Err: err.Error()})
		return
	case done:
		m.send(from, &wire.KeyspaceReply{Keyspaces: m.Keyspaces()})
		return
	}
	m.awaitKeyspaceCommand(now, o.Keyspace, from, Command{Kind: CmdOverride, Override: &o})
}

// applyOverride sets a keyspace's grace view or reassigned sites, unless
// a command applied since made the request invalid (its requesters are
// told).
func (m *Master) applyOverride(o wire.OverrideRequest) {
	done, err := ValidateOverride(m.keyspaces, o, m.opts.Settings.Site)
	if err == nil && !done {
		i := slices.IndexFunc(m.keyspaces, func(k wire.Keyspace) bool { return k.Name == o.Keyspace })
		v := wire.Override{Generation: o.Override.Generation, Sites: slices.Clone(o.Override.Sites)}
		if o.Reassign {
			m.keyspaces[i].Reassign = v
		} else {
			m.keyspaces[i].Grace = v
		}
	}
	m.answerKeyspaceWaiters(o.Keyspace, err)
}
