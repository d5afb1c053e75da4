package torture

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/catena-kv/catena/internal/causalwork"
	"github.com/catena-kv/catena/internal/check"
	"github.com/catena-kv/catena/internal/wire"
)

// Verdict is one checker's result.
type Verdict struct {
	// Checker names the checker; OK is its verdict.
	Checker string
	OK      bool
	// Detail says what was checked, or what failed; Reason is the short
	// form of a failure for the verdict line.
	Detail, Reason string
	// Files lists the artifacts the checker wrote.
	Files []string
}

// visualizedKeysMax bounds the porcupine visualizations one run writes.
const visualizedKeysMax = 5

// checkRegisters checks each register and counter key's history for
// linearizability with porcupine, against check.Model (the project's
// model of its operations, by kv.Apply). Unknown updates may have taken
// effect at any time after their call; failed operations took none and
// are left out. It writes porcupine's visualization of each failing key
// (up to visualizedKeysMax) into dir, if dir is not "".
func checkRegisters(history []Record, dir string, timeout time.Duration) Verdict {
	v := Verdict{Checker: "registers"}
	byKey := map[string][]check.Operation{}
	ops, ackedReads, ackedUpdates := 0, 0, 0
	for _, r := range history {
		if r.Set || r.Outcome == Failed {
			continue
		}
		if r.Outcome == OK && r.Op.Kind.IsQuery() {
			ackedReads++
		} else if r.Outcome == OK {
			ackedUpdates++
		}
		byKey[r.Op.Key] = append(byKey[r.Op.Key], r.operation())
		ops++
	}
	var illegal, undecided, bounded []string
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		result, info := check.Linearizable(byKey[key], timeout)
		if result == porcupine.Unknown && strings.HasPrefix(key, counterPrefix) {
			// Porcupine ran out of time on a counter: check Jepsen's
			// bounds instead, and say so.
			if ok, why := checkCounterBounds(byKey[key]); ok {
				bounded = append(bounded, key)
				continue
			} else {
				illegal = append(illegal, key)
				v.Detail += fmt.Sprintf("%s: %s; ", key, why)
				continue
			}
		}
		switch result {
		case porcupine.Ok:
			continue
		case porcupine.Illegal:
			illegal = append(illegal, key)
			if dir != "" && len(illegal) <= visualizedKeysMax {
				path := filepath.Join(dir, "linearizability-"+key+".html")
				if err := porcupine.VisualizePath(check.Model, info, path); err == nil {
					v.Files = append(v.Files, path)
				}
			}
		default:
			undecided = append(undecided, key)
		}
	}
	switch {
	case len(illegal) > 0:
		v.Reason = fmt.Sprintf("%d of %d register keys not linearizable (%s)", len(illegal), len(byKey), listSome(illegal))
		v.Detail = v.Reason + "; " + v.Detail
		if len(v.Files) > 0 {
			v.Detail += "; porcupine's visualization: " + strings.Join(v.Files, ", ")
		}
	case len(undecided) > 0:
		v.Reason = fmt.Sprintf("porcupine did not finish within %s for %d register keys (%s)", timeout, len(undecided), listSome(undecided))
		v.Detail = v.Reason
	case ackedReads == 0 || ackedUpdates == 0:
		// Unknown operations alone constrain nothing: a history of them
		// would pass whatever the cluster did.
		v.Reason = fmt.Sprintf("nothing to check: %d acknowledged register reads, %d updates", ackedReads, ackedUpdates)
		v.Detail = v.Reason
	default:
		v.OK = true
		v.Detail = fmt.Sprintf("%d operations on %d keys linearizable (porcupine)", ops, len(byKey))
		if len(bounded) > 0 {
			v.Detail = fmt.Sprintf("%d operations on %d keys: linearizable (porcupine) but %d counter keys porcupine did not decide within %s, which keep the counter bounds (every count between the acknowledged increments done before and every increment begun after, no count returned twice: %s)",
				ops, len(byKey), len(bounded), timeout, listSome(bounded))
		}
	}
	return v
}

// operation is r as the linearizability checker takes it: an operation
// whose outcome is unknown may or may not have taken effect.
func (r Record) operation() check.Operation {
	return check.Operation{Client: r.Client, Op: r.Op, Call: r.Call, Return: r.Return, Result: r.Result, Unknown: r.Outcome == Unknown}
}

// listSome names up to five items.
func listSome(items []string) string {
	if len(items) > 5 {
		return strings.Join(items[:5], ", ") + ", ..."
	}
	return strings.Join(items, ", ")
}

// checkSets checks the set workload against the final read of each set
// key after healing: every acknowledged append's element is there, no
// element is there twice, none is there that no client appended or
// whose append the client was told did not happen, and every value a
// client saw (an append's result, a read) is a prefix of the final value
// (appends are linearizable: each saw the list up to itself).
func checkSets(history []Record) Verdict {
	v := Verdict{Checker: "sets"}
	type attempt struct {
		key     string
		outcome Outcome
	}
	attempts := map[string]attempt{} // by element
	final := map[string][]byte{}
	appendsTo := map[string]int{}
	var seen []Record
	for _, r := range history {
		if !r.Set {
			continue
		}
		switch {
		case r.Op.Kind == wire.OpAppend:
			attempts[strings.TrimSpace(string(r.Op.Value))] = attempt{r.Op.Key, r.Outcome}
			appendsTo[r.Op.Key]++
			if r.Outcome == OK {
				seen = append(seen, r)
			}
		case r.Client == finalClient && r.Outcome == OK:
			final[r.Op.Key] = r.Result.Value
		case r.Outcome == OK:
			seen = append(seen, r)
		}
	}
	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	var unread []string
	for key := range appendsTo {
		if _, ok := final[key]; !ok {
			unread = append(unread, key)
		}
	}
	slices.Sort(unread)
	if len(unread) > 0 {
		problem("no final read of %s", listSome(unread))
	}
	present := map[string]string{} // element → key whose final value holds it
	lost, acked, unknown, unknownPresent := 0, 0, 0, 0
	for _, key := range slices.Sorted(maps.Keys(final)) {
		for _, e := range strings.Fields(string(final[key])) {
			if other, dup := present[e]; dup {
				problem("element %s twice in %s's final value (also in %s)", e, key, other)
				continue
			}
			present[e] = key
			a, ok := attempts[e]
			switch {
			case !ok || a.key != key:
				problem("element %s in %s's final value was never appended to it", e, key)
			case a.outcome == Failed:
				problem("element %s in %s's final value, but its append was reported not applied", e, key)
			}
		}
	}
	for _, e := range slices.Sorted(maps.Keys(attempts)) {
		a := attempts[e]
		if _, read := final[a.key]; !read {
			continue
		}
		_, there := present[e]
		switch a.outcome {
		case OK:
			acked++
			if !there {
				lost++
				problem("acknowledged element %s lost: not in %s's final value", e, a.key)
			}
		case Unknown:
			unknown++
			if there {
				unknownPresent++
			}
		}
	}
	for _, r := range seen {
		f, ok := final[r.Op.Key]
		if ok && !bytes.HasPrefix(f, r.Result.Value) {
			problem("client %d saw %s = %q at %s, not a prefix of the final value %q", r.Client, r.Op.Key, r.Result.Value, time.Duration(r.Call), f)
		}
	}
	if len(problems) > 0 {
		v.Reason = problems[0]
		if lost > 0 {
			v.Reason = fmt.Sprintf("%d acknowledged elements lost; %s", lost, problems[0])
		}
		v.Detail = strings.Join(problems, "; ")
		return v
	}
	if acked == 0 {
		v.Reason = "no acknowledged appends to check"
		v.Detail = v.Reason
		return v
	}
	v.OK = true
	v.Detail = fmt.Sprintf("%d keys: all %d acknowledged elements present once, %d of %d unknown ones present, every value seen a prefix of the final one",
		len(final), acked, unknownPresent, unknown)
	return v
}

// causalFindingsListed bounds the findings a causal verdict lists.
const causalFindingsListed = 3

// checkCausal checks the causal workload's history: causal+, the final
// reads converged, no acknowledged write lost, no read refused for a
// version the cluster lost (causalwork.Report.Findings).
func checkCausal(r causalwork.Report) Verdict {
	v := Verdict{Checker: "causal"}
	acked := 0
	for _, op := range r.History {
		if op.Op.Kind == wire.OpPut && !op.Unknown {
			acked++
		}
	}
	findings := r.Findings()
	if len(findings) == 0 {
		v.OK = true
		v.Detail = fmt.Sprintf("%d operations on %d keys (%d acknowledged writes, %d unknown): causal+, converged, no acknowledged write lost",
			len(r.History), len(r.Keys), acked, r.Unknown())
		return v
	}
	v.Reason = fmt.Sprintf("%d findings: %s", len(findings), strings.Join(findings[:min(len(findings), causalFindingsListed)], "; "))
	v.Detail = v.Reason
	return v
}
