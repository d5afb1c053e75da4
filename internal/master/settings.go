package master

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/catena-kv/catena/internal/placement"
	"github.com/catena-kv/catena/internal/wire"
)

// Settings are a cluster's settings: chosen when the cluster is created,
// part of the master's durable state from then on (State, master.json,
// the Raft log's first snapshot), and the same on every member. A master
// restarted without them resumes with the saved ones; none of them can
// change (docs/adr/0008-master-settings.md).
type Settings struct {
	// ReplicationFactor is t, the chain length the master restores by
	// extending shortened chains.
	ReplicationFactor int
	// Placement chooses recovery targets (and the ring order for ring).
	Placement placement.Strategy
	// Servers is the ring order of the initial servers; servers that
	// register later follow in id order.
	Servers []wire.NodeID `json:",omitempty"`
	// Volumes is the number of volumes of the default keyspace.
	Volumes int
	// DefaultK, when set, makes the default keyspace causal with this k
	// (1 ≤ k ≤ ReplicationFactor); 0 keeps it strong.
	DefaultK int `json:",omitempty"`
	// Site is this cluster's site among Sites, in a deployment of several
	// sites (0: one site). Geo keyspaces name sites of Sites
	// (docs/adr/0013-sites-and-geo-causal.md).
	Site  wire.SiteID `json:",omitempty"`
	Sites []wire.Site `json:",omitempty"`
	// DefaultSites are the sites that replicate the default keyspace
	// (it must then be causal or hierarchical); empty: this site only.
	DefaultSites []wire.SiteID `json:",omitempty"`
	// DefaultHierarchical, with DefaultSites, makes the default keyspace
	// hierarchical (docs/adr/0016; partition depth 1), relaxed with
	// DefaultRelaxed: the simulator's mode hierarchical.
	DefaultHierarchical bool `json:",omitempty"`
	DefaultRelaxed      bool `json:",omitempty"`
	// Cluster names the deployment, the same at every site: a server
	// or master of a site refuses the sites' messages (wire.Ship,
	// wire.ConfigRequest, wire.ConfigReply) of another deployment. Set
	// only with Sites; empty there means DefaultCluster(Sites)
	// (ClusterName).
	Cluster string `json:",omitempty"`
}

// ClusterNameMax bounds the length of a deployment's name.
const ClusterNameMax = 64

// ClusterName returns the deployment's name: Cluster, or with sites and
// no name given the one derived from the sites (DefaultCluster); empty
// with one site.
func (s Settings) ClusterName() string {
	if s.Cluster != "" || len(s.Sites) == 0 {
		return s.Cluster
	}
	return DefaultCluster(s.Sites)
}

// DefaultCluster derives a deployment's name from its sites (ids, names
// and masters' addresses), which every master of every site is given
// alike: "sites-" and 12 hex digits of their SHA-256. Two deployments
// share it only if they list the same masters.
func DefaultCluster(sites []wire.Site) string {
	h := sha256.New()
	for _, st := range sites {
		fmt.Fprintf(h, "%d=%s@", st.ID, st.Name)
		for _, m := range st.Masters {
			fmt.Fprintf(h, "%s,", m)
		}
		h.Write([]byte{';'})
	}
	return fmt.Sprintf("sites-%x", h.Sum(nil)[:6])
}

// validateClusterName checks a deployment's name: printable, no spaces,
// at most ClusterNameMax bytes.
func validateClusterName(name string) error {
	if len(name) > ClusterNameMax {
		return fmt.Errorf("cluster name %q: longer than %d bytes", name, ClusterNameMax)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("cluster name %q: want printable characters without spaces", name)
		}
	}
	return nil
}

// IsZero reports whether no setting is set: state saved before settings
// were part of it, or options of a master that resumes.
func (s Settings) IsZero() bool {
	return s.ReplicationFactor == 0 && s.Placement == "" && len(s.Servers) == 0 && s.Volumes == 0
}

// Equal reports whether two settings are the same.
func (s Settings) Equal(o Settings) bool {
	return s.ReplicationFactor == o.ReplicationFactor && s.Placement == o.Placement &&
		slices.Equal(s.Servers, o.Servers) && s.Volumes == o.Volumes && s.DefaultK == o.DefaultK &&
		s.DefaultHierarchical == o.DefaultHierarchical && s.DefaultRelaxed == o.DefaultRelaxed &&
		s.Site == o.Site && s.Cluster == o.Cluster && slices.Equal(s.DefaultSites, o.DefaultSites) && slices.EqualFunc(s.Sites, o.Sites, func(a, b wire.Site) bool {
		return a.ID == b.ID && a.Name == b.Name && slices.Equal(a.Masters, b.Masters)
	})
}

// Clone returns a copy that shares nothing with s.
func (s Settings) Clone() Settings {
	s.Servers = slices.Clone(s.Servers)
	s.Sites = slices.Clone(s.Sites)
	s.DefaultSites = slices.Clone(s.DefaultSites)
	for i := range s.Sites {
		s.Sites[i].Masters = slices.Clone(s.Sites[i].Masters)
	}
	return s
}

// withDefaults fills in the settings a new cluster may leave unset:
// random placement, and as many volumes as it has chains.
func (s Settings) withDefaults(chains int) Settings {
	s = s.Clone()
	if s.Placement == "" {
		s.Placement = placement.Random
	}
	if s.Volumes == 0 {
		s.Volumes = chains
	}
	return s
}

// Validate reports settings a cluster cannot run with.
func (s Settings) Validate() error {
	var errs []error
	if s.ReplicationFactor < 1 {
		errs = append(errs, fmt.Errorf("replication factor %d < 1", s.ReplicationFactor))
	}
	if _, err := placement.Parse(string(s.Placement)); err != nil {
		errs = append(errs, err)
	}
	if s.Volumes < 1 {
		errs = append(errs, fmt.Errorf("%d volumes < 1", s.Volumes))
	}
	if s.DefaultK < 0 || s.DefaultK > s.ReplicationFactor {
		errs = append(errs, fmt.Errorf("default keyspace k=%d outside 0..t (t=%d)", s.DefaultK, s.ReplicationFactor))
	}
	if s.DefaultHierarchical && (s.DefaultK != 0 || len(s.DefaultSites) < 2) {
		errs = append(errs, fmt.Errorf("a hierarchical default keyspace needs several default sites and no k (sites %v, k=%d)", s.DefaultSites, s.DefaultK))
	}
	if s.DefaultRelaxed && !s.DefaultHierarchical {
		errs = append(errs, errors.New("a relaxed default keyspace must be hierarchical"))
	}
	seen := map[wire.NodeID]bool{}
	for _, id := range s.Servers {
		if id == "" || seen[id] {
			errs = append(errs, fmt.Errorf("servers: empty or repeated server %q", id))
		}
		seen[id] = true
	}
	errs = append(errs, s.validateSites())
	return errors.Join(errs...)
}

// validateSites checks the sites: distinct non-zero ids in increasing
// order with names and masters, this site among them.
func (s Settings) validateSites() error {
	if s.Site == 0 && len(s.Sites) == 0 && len(s.DefaultSites) == 0 {
		if s.Cluster != "" {
			return fmt.Errorf("cluster name %q without sites: it names a deployment of several sites", s.Cluster)
		}
		return nil
	}
	var errs []error
	if err := validateClusterName(s.Cluster); err != nil {
		errs = append(errs, err)
	}
	names := map[string]bool{}
	for i, st := range s.Sites {
		switch {
		case st.ID == 0:
			errs = append(errs, fmt.Errorf("sites: site %q has id 0", st.Name))
		case i > 0 && s.Sites[i-1].ID >= st.ID:
			errs = append(errs, fmt.Errorf("sites: ids not in increasing order at %d", st.ID))
		}
		if st.Name == "" || names[st.Name] {
			errs = append(errs, fmt.Errorf("sites: empty or repeated name %q", st.Name))
		}
		names[st.Name] = true
		if len(st.Masters) == 0 {
			errs = append(errs, fmt.Errorf("sites: site %q has no masters", st.Name))
		}
	}
	if !slices.ContainsFunc(s.Sites, func(st wire.Site) bool { return st.ID == s.Site }) {
		errs = append(errs, fmt.Errorf("sites: this site %d is not among the sites", s.Site))
	}
	if len(s.DefaultSites) > 0 {
		if s.DefaultK == 0 && !s.DefaultHierarchical {
			errs = append(errs, errors.New("default keyspace of several sites must be causal (set its k) or hierarchical"))
		}
		for i, id := range s.DefaultSites {
			if i > 0 && s.DefaultSites[i-1] >= id || !slices.ContainsFunc(s.Sites, func(st wire.Site) bool { return st.ID == id }) {
				errs = append(errs, fmt.Errorf("default keyspace's sites %v: give known sites in increasing order", s.DefaultSites))
				break
			}
		}
		if !slices.Contains(s.DefaultSites, s.Site) {
			errs = append(errs, fmt.Errorf("default keyspace's sites %v leave out this site %d", s.DefaultSites, s.Site))
		}
	}
	return errors.Join(errs...)
}

// A Contradiction is a setting given to a master that resumes from saved
// state, with a value other than the saved one.
type Contradiction struct {
	// Setting names the Settings field.
	Setting      string
	Saved, Given string
}

func (c Contradiction) String() string {
	return fmt.Sprintf("%s: saved %s, given %s", c.Setting, c.Saved, c.Given)
}

// Contradictions lists the settings given sets (non-zero) to a value
// other than s's; unset ones are not compared.
func (s Settings) Contradictions(given Settings) []Contradiction {
	var out []Contradiction
	if given.ReplicationFactor != 0 && given.ReplicationFactor != s.ReplicationFactor {
		out = append(out, Contradiction{"ReplicationFactor", strconv.Itoa(s.ReplicationFactor), strconv.Itoa(given.ReplicationFactor)})
	}
	if given.Placement != "" && given.Placement != s.Placement {
		out = append(out, Contradiction{"Placement", string(s.Placement), string(given.Placement)})
	}
	if len(given.Servers) > 0 && !slices.Equal(given.Servers, s.Servers) {
		out = append(out, Contradiction{"Servers", joinNodeIDs(s.Servers), joinNodeIDs(given.Servers)})
	}
	if given.Volumes != 0 && given.Volumes != s.Volumes {
		out = append(out, Contradiction{"Volumes", strconv.Itoa(s.Volumes), strconv.Itoa(given.Volumes)})
	}
	if given.DefaultK != 0 && given.DefaultK != s.DefaultK {
		out = append(out, Contradiction{"DefaultK", strconv.Itoa(s.DefaultK), strconv.Itoa(given.DefaultK)})
	}
	if given.Site != 0 && given.Site != s.Site {
		out = append(out, Contradiction{"Site", fmt.Sprint(s.Site), fmt.Sprint(given.Site)})
	}
	if len(given.Sites) > 0 && !(Settings{Sites: given.Sites}).Equal(Settings{Sites: s.Sites}) {
		out = append(out, Contradiction{"Sites", fmt.Sprint(s.Sites), fmt.Sprint(given.Sites)})
	}
	if given.Cluster != "" && given.Cluster != s.ClusterName() {
		out = append(out, Contradiction{"Cluster", s.ClusterName(), given.Cluster})
	}
	if len(given.DefaultSites) > 0 && !slices.Equal(given.DefaultSites, s.DefaultSites) {
		out = append(out, Contradiction{"DefaultSites", fmt.Sprint(s.DefaultSites), fmt.Sprint(given.DefaultSites)})
	}
	return out
}

// checkGiven reports the settings given that contradict s, the saved
// ones.
func (s Settings) checkGiven(given Settings) error {
	var parts []string
	for _, c := range s.Contradictions(given) {
		parts = append(parts, c.String())
	}
	if len(parts) > 0 {
		return fmt.Errorf("master options contradict the saved settings (a cluster's settings cannot change): %s", strings.Join(parts, "; "))
	}
	return nil
}

// joinNodeIDs formats ids as a comma-separated list, as flags take them.
func joinNodeIDs(ids []wire.NodeID) string {
	if len(ids) == 0 {
		return "(none)"
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = string(id)
	}
	return strings.Join(parts, ",")
}
