package main

import (
	"os/exec"
	"strings"
	"testing"
)

// labDependencies are the module paths whose packages the lab's commands
// (cmd/catena-lab) need and a deployment's binary must not link: the
// benchmark's YCSB, the experiments' plots, and etcd's client with gRPC.
var labDependencies = []string{
	"github.com/pingcap/go-ycsb",
	"gonum.org/",
	"go.etcd.io/etcd/client",
	"google.golang.org/grpc",
}

// The catena binary a deployment runs builds without the lab's code and
// its dependencies (the simulator, benchmarks, experiments and torture
// test are catena-lab's).
func TestLeanBinaryLinksNoLabDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/catena-kv/catena/cmd/catena").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	labPackages := []string{"internal/sim", "internal/bench", "internal/experiment", "internal/torture"}
	for _, pkg := range strings.Fields(string(out)) {
		for _, dep := range labDependencies {
			if strings.HasPrefix(pkg, dep) {
				t.Errorf("cmd/catena depends on %s (%s*): a lab dependency; keep it in cmd/catena-lab", pkg, dep)
			}
		}
		for _, lab := range labPackages {
			if pkg == "github.com/catena-kv/catena/"+lab {
				t.Errorf("cmd/catena depends on %s: the lab's code; keep it in cmd/catena-lab", pkg)
			}
		}
	}
}
