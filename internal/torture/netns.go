package torture

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The test network: every host is a network namespace named
// Prefix-NAME whose eth0 is one end of a veth pair; the other end is a
// port of the bridge br0 in the switch namespace Prefix-sw. The harness
// (and its clients) reach the hosts from the root namespace through one
// more veth pair, Prefix-h, whose address is the subnet's .1. Nothing is
// routed out of the subnet: traffic stays among the test's own hosts.
//
// The bridge lives in its own namespace rather than in the root one so
// that the root namespace's firewall (Docker sets FORWARD to DROP, and
// br_netfilter passes bridged frames through it) neither blocks the test
// nor needs changing.
const (
	// faultChain is the iptables chain in each host's namespace that
	// holds the current faults; INPUT jumps to it, and healing flushes it.
	faultChain = "CATENA-FAULTS"
	switchName = "sw"
	bridgeName = "br0"
)

// Host is one host of the test network: a namespace with one address.
type Host struct {
	// Name is the host's short name (m1, s3), NS its namespace.
	Name, NS string
	// IP is the host's address on the test network.
	IP string
}

// Net is the test network of one run.
type Net struct {
	// Prefix starts the name of every namespace and link the run creates,
	// so a later run recognises what a crashed one left behind.
	Prefix string
	// Subnet is the first three octets of the /24 the hosts live in; the
	// harness is .1.
	Subnet string
	Hosts  []*Host
}

// NewNet describes (without creating anything) a network of the named
// hosts, numbered from .11 in the order given.
func NewNet(prefix, subnet string, names []string) (*Net, error) {
	if prefix == "" || len(prefix) > 8 || strings.ContainsAny(prefix, " /-") {
		return nil, fmt.Errorf("network prefix %q: want 1 to 8 characters without spaces, slashes or dashes", prefix)
	}
	if ip := net.ParseIP(subnet + ".1").To4(); ip == nil {
		return nil, fmt.Errorf("subnet %q: want three octets, like 10.213.0", subnet)
	}
	n := &Net{Prefix: prefix, Subnet: subnet}
	for i, name := range names {
		// The switch-side veth end is Prefix-NAME, at most 15 bytes.
		if name == "" || name == switchName || name == "h" || len(prefix)+1+len(name) > 15 || 11+i > 254 {
			return nil, fmt.Errorf("host name %q: empty, reserved or too long, or too many hosts", name)
		}
		n.Hosts = append(n.Hosts, &Host{Name: name, NS: prefix + "-" + name, IP: fmt.Sprintf("%s.%d", subnet, 11+i)})
	}
	return n, nil
}

// HarnessIP is the root namespace's address on the test network.
func (n *Net) HarnessIP() string { return n.Subnet + ".1" }

func (n *Net) switchNS() string    { return n.Prefix + "-" + switchName }
func (n *Net) harnessLink() string { return n.Prefix + "-h" }

// Host returns the host named name, or nil.
func (n *Net) Host(name string) *Host {
	for _, h := range n.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// command executes a command and returns its error with its output.
func command(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		msg := string(bytes.TrimSpace(out))
		if first, _, more := strings.Cut(msg, "\n"); more {
			msg = first + " ..."
		}
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, msg)
	}
	return nil
}

// inNS runs a command in namespace ns.
func inNS(ns string, args ...string) error {
	return command("ip", append([]string{"netns", "exec", ns}, args...)...)
}

// Create builds the network. On error, what it built is removed again.
func (n *Net) Create() (err error) {
	if err := n.checkSubnetFree(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			n.Remove()
		}
	}()
	sw := n.switchNS()
	for _, args := range [][]string{
		{"netns", "add", sw},
		{"-n", sw, "link", "add", bridgeName, "type", "bridge"},
		{"-n", sw, "link", "set", bridgeName, "up"},
		{"-n", sw, "link", "set", "lo", "up"},
		{"link", "add", n.harnessLink(), "type", "veth", "peer", "name", "harness", "netns", sw},
		{"addr", "add", n.HarnessIP() + "/24", "dev", n.harnessLink()},
		{"link", "set", n.harnessLink(), "up"},
		{"-n", sw, "link", "set", "dev", "harness", "master", bridgeName, "up"},
	} {
		if err := command("ip", args...); err != nil {
			return err
		}
	}
	for _, h := range n.Hosts {
		port := n.Prefix + "-" + h.Name
		for _, args := range [][]string{
			{"netns", "add", h.NS},
			{"link", "add", "eth0", "netns", h.NS, "type", "veth", "peer", "name", port, "netns", sw},
			{"-n", h.NS, "addr", "add", h.IP + "/24", "dev", "eth0"},
			{"-n", h.NS, "link", "set", "eth0", "up"},
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"-n", sw, "link", "set", "dev", port, "master", bridgeName, "up"},
		} {
			if err := command("ip", args...); err != nil {
				return err
			}
		}
		for _, args := range [][]string{
			{"-N", faultChain},
			{"-A", "INPUT", "-j", faultChain},
			// A rule without a target changes nothing; with a conntrack
			// match it makes the namespace track every connection from
			// its first packet, so one-way faults know which side opened
			// each connection (a connection picked up mid-stream gets
			// the direction of whichever packet came first).
			{"-A", "OUTPUT", "-m", "conntrack", "--ctstate", "NEW,ESTABLISHED,RELATED,INVALID,UNTRACKED"},
		} {
			if err := inNS(h.NS, append([]string{"iptables", "-w"}, args...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkSubnetFree refuses a subnet that the root namespace already uses,
// unless by a leftover of this prefix.
func (n *Net) checkSubnetFree() error {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		return fmt.Errorf("ip addr show: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.HasPrefix(f[3], n.Subnet+".") {
			return fmt.Errorf("subnet %s.0/24 is in use here (%s on %s): choose another with -subnet", n.Subnet, f[3], f[1])
		}
	}
	return nil
}

// Remove deletes the network: every namespace of the prefix (killing any
// process left in one) and the harness's link. It removes whatever
// exists, so it also cleans up after a run that crashed.
func (n *Net) Remove() error {
	_, err := RemoveLeftovers(n.Prefix)
	return err
}

// namespaces lists the network namespaces whose names start with
// prefix-.
func namespaces(prefix string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %w", err)
	}
	return parseNamespaces(string(out), prefix), nil
}

// parseNamespaces picks from ip netns list's output the names that start
// with prefix-.
func parseNamespaces(out, prefix string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			names = append(names, f[0])
		}
	}
	slices.Sort(names)
	return names
}

// RemoveLeftovers removes every namespace whose name starts with prefix-,
// after killing (SIGKILL, by pid) the processes in it, and the root
// namespace's link prefix-h. It returns what it removed.
func RemoveLeftovers(prefix string) ([]string, error) {
	names, err := namespaces(prefix)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	// The harness link first: deleting a namespace deletes the links in
	// it (and their veth peers) asynchronously, deleting a link does not.
	link := prefix + "-h"
	if exec.Command("ip", "link", "show", link).Run() == nil {
		if err := command("ip", "link", "del", link); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, "link "+link)
		}
	}
	for _, ns := range names {
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					syscall.Kill(pid, syscall.SIGCONT) // a paused process dies only once continued
					syscall.Kill(pid, syscall.SIGKILL)
					removed = append(removed, fmt.Sprintf("process %d in %s", pid, ns))
				}
			}
		}
		if err := command("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "namespace "+ns)
	}
	return removed, errors.Join(errs...)
}

// Rule is one iptables rule in a host's fault chain.
type Rule struct {
	// At is the host whose namespace holds the rule.
	At *Host
	// Args are iptables's arguments after "-A CHAIN".
	Args []string
}

func (r Rule) String() string { return r.At.Name + ": " + strings.Join(r.Args, " ") }

// Cut returns the rules that drop every packet between a and b, both ways.
func Cut(a, b *Host) []Rule {
	return []Rule{
		{At: a, Args: []string{"-s", b.IP, "-j", "DROP"}},
		{At: b, Args: []string{"-s", a.IP, "-j", "DROP"}},
	}
}

// Lose returns the rule that loses every message from one host to
// another while messages the other way still arrive. Catena's transport
// carries a node's messages to a peer on a connection that node dialed,
// so the rule drops at to the packets of connections from opened (the
// original direction) and keeps the replies on connections to opened,
// which carry to's messages and their acknowledgements.
func Lose(from, to *Host) []Rule {
	return []Rule{{At: to, Args: []string{"-s", from.IP, "-m", "conntrack", "--ctdir", "ORIGINAL", "-j", "DROP"}}}
}

// Apply adds rules to their hosts' fault chains.
func (n *Net) Apply(rules []Rule) error {
	for _, r := range rules {
		if err := inNS(r.At.NS, append([]string{"iptables", "-w", "-A", faultChain}, r.Args...)...); err != nil {
			return err
		}
	}
	return nil
}

// Heal removes every fault: it flushes every host's fault chain.
func (n *Net) Heal() error {
	var errs []error
	for _, h := range n.Hosts {
		if err := inNS(h.NS, "iptables", "-w", "-F", faultChain); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckEnvironment reports why this machine cannot run the test network,
// or nil: it needs root, ip and iptables with the conntrack match, and
// network namespaces. It creates and removes a namespace named
// prefix-probe.
func CheckEnvironment(prefix string) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces and iptables)")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("needs %s (apt-get install iproute2 iptables)", tool)
		}
	}
	ns := prefix + "-probe"
	exec.Command("ip", "netns", "del", ns).Run()
	if err := command("ip", "netns", "add", ns); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	defer command("ip", "netns", "del", ns)
	if err := inNS(ns, "iptables", "-w", "-A", "INPUT", "-s", "10.0.0.1", "-m", "conntrack", "--ctdir", "ORIGINAL", "-j", "DROP"); err != nil {
		return fmt.Errorf("iptables with the conntrack match does not work in a namespace: %w", err)
	}
	return nil
}
