package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/catena-kv/catena/internal/cli"
)

// baseFile names, in the repository, the file that gives the base
// release: one line "<semver> <40-hex commit>".
const baseFile = "internal/release/base.txt"

func runBuildRelease(args []string, stdout io.Writer) error {
	fs := cli.NewFlagSet("build-release", "catena-lab build-release -out PATH [-commit REV] [-repo DIR]", `Builds the catena binary of an earlier commit of this repository: the old
binary of an upgrade test (catena-lab torture --upgrade-from PATH). It
extracts the commit's tree from git (git archive, into a temporary
directory removed afterwards) and runs go build -trimpath ./cmd/catena
there. Without -commit it builds the base release, the commit that
`+baseFile+` names ("<semver> <commit>"). A shallow clone may lack the
commit: fetch the history first (git fetch --unshallow).`)
	commit := fs.String("commit", "", "the commit to build: a hash, tag or any revision git names (default: the base release's, from "+baseFile+")")
	out := fs.String("out", "", "where to write the binary (required)")
	repo := fs.String("repo", ".", "a directory in the repository's clone")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	if *out == "" {
		return cli.UsageErrorf("-out is required: where to write the binary")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	top, err := gitOutput(ctx, *repo, "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("-repo %s is not in a git clone: %w", *repo, err)
	}
	what := *commit
	if what == "" {
		version, hash, err := readBase(filepath.Join(top, baseFile))
		if err != nil {
			return err
		}
		*commit, what = hash, fmt.Sprintf("the base release %s (%s, from %s)", version, hash, baseFile)
	}
	began := time.Now()
	fmt.Fprintf(stdout, "build-release: building %s\n", what)
	hash, err := buildRelease(ctx, top, *commit, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "build-release: wrote %s, catena at %s, in %s\n", *out, hash, time.Since(began).Round(time.Second))
	return nil
}

var (
	semverPattern = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$`)
	hashPattern   = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// readBase reads the base release's version and commit from the file at
// path: one line "<semver> <40-hex commit>".
func readBase(path string) (version, commit string, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("%s does not exist: name the commit with -commit, or create the file (one line: <semver> <40-hex commit>)", path)
	}
	if err != nil {
		return "", "", err
	}
	return parseBase(string(data), path)
}

// parseBase parses the base file's text (from path, for messages).
func parseBase(text, path string) (version, commit string, err error) {
	f := strings.Fields(text)
	if len(f) != 2 || !semverPattern.MatchString(f[0]) || !hashPattern.MatchString(f[1]) {
		return "", "", fmt.Errorf("%s: want one line \"<semver> <40-hex commit>\", like \"0.1.0 %s\"; it holds %q", path, strings.Repeat("0", 40), strings.TrimSpace(text))
	}
	return f[0], f[1], nil
}

// buildRelease builds cmd/catena of the commit rev of the repository
// whose top directory is top into out, and returns the commit's hash.
// The commit's tree is extracted with git archive into a temporary
// directory, removed afterwards.
func buildRelease(ctx context.Context, top, rev, out string) (string, error) {
	hash, err := resolveCommit(ctx, top, rev)
	if err != nil {
		return "", err
	}
	out, err = filepath.Abs(out)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "catena-release-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := extractTree(ctx, top, hash, dir); err != nil {
		return "", err
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/catena")
	build.Dir = dir
	// The tree is a module of its own: no workspace of the caller's.
	build.Env = append(os.Environ(), "GOWORK=off")
	if output, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/catena at %s: %v\n%s", hash, err, output)
	}
	return hash, nil
}

// resolveCommit returns the hash of the commit rev names in the clone at
// top, or an error that says how to get it: a shallow clone may lack it.
func resolveCommit(ctx context.Context, top, rev string) (string, error) {
	hash, err := gitOutput(ctx, top, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err == nil {
		return hash, nil
	}
	if shallow, _ := gitOutput(ctx, top, "rev-parse", "--is-shallow-repository"); shallow == "true" {
		return "", fmt.Errorf("commit %s is not in this clone, which is shallow: fetch the history (git fetch --unshallow) and try again", rev)
	}
	return "", fmt.Errorf("commit %s is not in this clone: fetch the branch or tag that holds it (git fetch)", rev)
}

// extractTree writes the tree of commit hash of the clone at top into
// dir: git archive hash | tar -x -C dir.
func extractTree(ctx context.Context, top, hash, dir string) error {
	archive := exec.CommandContext(ctx, "git", "-C", top, "archive", "--format=tar", hash)
	tar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	tar.Stdin = pipe
	var archiveErr, tarErr strings.Builder
	archive.Stderr, tar.Stderr = &archiveErr, &tarErr
	if err := archive.Start(); err != nil {
		return fmt.Errorf("git archive: %w", err)
	}
	if err := tar.Run(); err != nil {
		archive.Process.Kill()
		archive.Wait()
		return fmt.Errorf("tar -x -C %s: %v: %s", dir, err, strings.TrimSpace(tarErr.String()))
	}
	if err := archive.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", hash, err, strings.TrimSpace(archiveErr.String()))
	}
	return nil
}

// gitOutput runs git -C dir args and returns its trimmed standard
// output, or an error with its standard error.
func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, msg)
		}
		return "", fmt.Errorf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
