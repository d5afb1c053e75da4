package wire

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/catena-kv/catena/internal/release"
)

// The frozen corpora (docs/adr/0026, step 7): testdata/corpus holds a
// directory per release, with every message of testMessages as that
// release encoded it (NAME.bin) and what it decodes to (NAME.json).
// Every later release must decode each file to its JSON: a change that
// breaks one breaks upgrades from that release. A release's files are
// written once, with -update-corpus, and never changed after.

var updateCorpus = flag.Bool("update-corpus", false, "write this release's missing corpus files (testdata/corpus/RELEASE); existing files are never overwritten")

const corpusDir = "testdata/corpus"

// corpusName is a test message's file name in a corpus.
func corpusName(test string) string { return strings.ReplaceAll(test, "/", "_") }

func TestFrozenCorpora(t *testing.T) {
	current := filepath.Join(corpusDir, release.Version)
	for _, tc := range testMessages() {
		bin := filepath.Join(current, corpusName(tc.name)+".bin")
		if _, err := os.Stat(bin); err == nil {
			continue
		}
		if !*updateCorpus {
			t.Errorf("%s is missing: this release's corpus lacks message %s (go test ./internal/wire -run TestFrozenCorpora -update-corpus writes it)", bin, tc.name)
			continue
		}
		j, err := json.MarshalIndent(tc.msg, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(current, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, mustMarshal(t, tc.msg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(strings.TrimSuffix(bin, ".bin")+".json", append(j, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	releases, err := os.ReadDir(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, r := range releases {
		bins, err := filepath.Glob(filepath.Join(corpusDir, r.Name(), "*.bin"))
		if err != nil {
			t.Fatal(err)
		}
		for _, bin := range bins {
			files++
			checkCorpusFile(t, bin, r.Name() == release.Version)
		}
	}
	if files == 0 {
		t.Fatalf("no corpus files under %s", corpusDir)
	}
}

// checkCorpusFile decodes a frozen message and compares it with its
// JSON; a file of the current release must also be what this build
// encodes.
func checkCorpusFile(t *testing.T, bin string, current bool) {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Unmarshal(b)
	if err != nil {
		t.Errorf("%s no longer decodes: %v", bin, err)
		return
	}
	j, err := os.ReadFile(strings.TrimSuffix(bin, ".bin") + ".json")
	if err != nil {
		t.Fatal(err)
	}
	want := reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message)
	if err := json.Unmarshal(j, want); err != nil {
		t.Fatalf("%s's JSON: %v", bin, err)
	}
	if !equalMessages(m, want) {
		t.Errorf("%s decodes to\n%#v\nnot, as frozen,\n%#v", bin, m, want)
	}
	if current {
		if again := mustMarshal(t, m); !bytes.Equal(again, b) {
			t.Errorf("%s: this release encodes it as %x, not as frozen %x: a frozen release's encoding changed", bin, again, b)
		}
	}
}
