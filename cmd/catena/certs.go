package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/catena-kv/catena/internal/cli"
	"github.com/catena-kv/catena/internal/security"
)

const certsSynopsis = "catena certs ca -dir DIR\n       catena certs issue -dir DIR -role ROLE -name NAME[,NAME...] [-hosts H,...] [-valid-for D]"

// runCerts creates a development CA and certificates it issues.
func runCerts(args []string, stdout io.Writer) error {
	if len(args) > 0 && cli.IsHelp(args[0]) {
		args = []string{"ca", "-h"} // both verbs' usage is the command's
	}
	if len(args) == 0 || (args[0] != "ca" && args[0] != "issue") {
		return cli.UsageErrorf("want ca or issue (usage: %s)", certsSynopsis)
	}
	verb, args := args[0], args[1:]
	fs := cli.NewFlagSet("certs", certsSynopsis, `Creates a cluster CA (ca: DIR/ca.crt and DIR/ca.key, ECDSA P-256) and
certificates it signs (issue: DIR/<role>-<name>.crt and .key), each carrying
its role and name (a URI SAN catena://role/<role>/<name>). A master's or
server's name is its -listen address, which its peers check; a client's is
its user name. Give processes -tls-ca DIR/ca.crt with their -tls-cert and
-tls-key. Writing over a certificate renews it: processes read it again
without a restart. Keep ca.key off the cluster's machines
(docs/operations.md, "Security").`)
	dir := fs.String("dir", ".", "directory of the CA and the certificates")
	role := fs.String("role", "", "issue: master, server, site, client or proxy")
	names := fs.String("name", "", "issue: comma-separated names: a member's listen address (host:port), a client's user name, a proxy's name")
	hosts := fs.String("hosts", "", "issue: extra DNS names or IP addresses the certificate is valid for (HTTPS, redis-cli --tls)")
	validFor := fs.Duration("valid-for", 0, "validity (default: 10 years for the CA, 1 year for a certificate)")
	args, err := cli.ParseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cli.NoArguments(args); err != nil {
		return err
	}
	switch verb {
	case "ca":
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(*dir, security.CAKeyFile)); err == nil {
			return fmt.Errorf("%s already holds a CA (%s): remove it first to make a new one, which invalidates every certificate of the old", *dir, security.CAKeyFile)
		}
		ca, err := security.NewCA("Catena cluster CA", cmp.Or(*validFor, security.CAValidityDefault))
		if err != nil {
			return err
		}
		if err := ca.Save(*dir); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "CA: %s (key %s, keep it secret)\n", filepath.Join(*dir, security.CACertFile), filepath.Join(*dir, security.CAKeyFile))
		return nil
	}
	r, err := security.ParseRole(*role)
	if err != nil {
		return cli.UsageErrorf("-role: %v", err)
	}
	if *names == "" {
		return cli.UsageErrorf("issue needs -name")
	}
	ca, err := security.LoadCA(*dir)
	if err != nil {
		return fmt.Errorf("no CA in %s (catena certs ca -dir %s first): %w", *dir, *dir, err)
	}
	var extra []string
	if *hosts != "" {
		extra = strings.Split(*hosts, ",")
	}
	_, err = issueCerts(ca, *dir, r, strings.Split(*names, ","), extra, *validFor, stdout)
	return err
}

// issueCerts issues and saves a certificate per name and returns their
// files.
func issueCerts(ca *security.CA, dir string, role security.Role, names, hosts []string, validFor time.Duration, stdout io.Writer) ([]security.Files, error) {
	var out []security.Files
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			return nil, errors.New("-name: an empty name")
		}
		id := security.Identity{Role: role, Name: n}
		o := security.IssueOptions{Hosts: hosts}
		if validFor > 0 {
			o.NotAfter = time.Now().Add(validFor)
		}
		is, err := ca.Issue(id, o)
		if err != nil {
			return nil, err
		}
		files, err := is.Save(dir, id)
		if err != nil {
			return nil, err
		}
		if stdout != nil {
			fmt.Fprintf(stdout, "%s: -tls-cert %s -tls-key %s (until %s)\n", id, files.Cert, files.Key, is.Cert.NotAfter.Format("2006-01-02"))
		}
		out = append(out, files)
	}
	return out, nil
}
