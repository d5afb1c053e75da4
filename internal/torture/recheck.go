package torture

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/catena-kv/catena/internal/wire"
)

// Recheck checks again the history a failed run saved (dir/history.jsonl,
// and the proxy's and causal workloads' if there) with every checker, giving porcupine checkTimeout per key: a run whose
// verdict was that porcupine did not finish in time (a key with many
// operations of unknown outcome) can be settled afterwards. It writes one
// line per checker and returns whether all passed.
func Recheck(dir string, checkTimeout time.Duration, out io.Writer) (bool, error) {
	history, err := readHistory(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "rechecking %d operations from %s (porcupine: %s per key)\n", len(history), dir, checkTimeout)
	ok := true
	verdicts := []Verdict{checkRegisters(history, dir, checkTimeout), checkSets(history)}
	if proxy, err := readHistory(filepath.Join(dir, proxyHistoryFile)); err == nil {
		verdicts = append(verdicts, checkProxy(proxy, checkTimeout))
	} else if !os.IsNotExist(err) {
		return false, err
	}
	if report, err := readCausalReport(filepath.Join(dir, causalHistoryFile)); err == nil {
		verdicts = append(verdicts, checkCausal(report))
	} else if !os.IsNotExist(err) {
		return false, err
	}
	for _, v := range verdicts {
		state := "ok"
		if !v.OK {
			state, ok = "FAIL", false
		}
		fmt.Fprintf(out, "  %-9s %s: %s\n", v.Checker, state, v.Detail)
	}
	return ok, nil
}

// readHistory reads a history writeHistory wrote.
func readHistory(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kinds := map[string]wire.OpKind{}
	for k := wire.OpKind(1); k.Valid(); k++ {
		kinds[k.String()] = k
	}
	statuses := map[string]wire.Status{}
	for s := wire.Status(0); s < 16; s++ {
		statuses[s.String()] = s
	}
	outcomes := map[string]Outcome{OK.String(): OK, Unknown.String(): Unknown, Failed.String(): Failed}
	var history []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var j jsonRecord
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		kind, okKind := kinds[j.Op]
		outcome, okOutcome := outcomes[j.Outcome]
		if !okKind || !okOutcome {
			return nil, fmt.Errorf("%s:%d: unknown operation %q or outcome %q", path, line, j.Op, j.Outcome)
		}
		r := Record{Set: j.Workload == "set", Client: j.Client, Call: j.CallNs, Return: j.ReturnNs, Outcome: outcome, Err: j.Err,
			Op:     wire.Op{Kind: kind, Key: j.Key, Value: bytesOrNil(j.Value), Expected: bytesOrNil(j.Expected), ExpectAbsent: j.ExpectAbsent, Delta: j.Delta},
			Result: wire.Result{Found: j.Found, Value: bytesOrNil(j.Result)}}
		if j.Status != "" {
			st, ok := statuses[j.Status]
			if !ok {
				return nil, fmt.Errorf("%s:%d: unknown status %q", path, line, j.Status)
			}
			r.Result.Status = st
		}
		history = append(history, r)
	}
	return history, sc.Err()
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
