package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/catena-kv/catena/client"
	"github.com/catena-kv/catena/internal/cli"
)

const userSynopsis = `catena user add NAME [-roles ROLE,...] [-password-file FILE | -password-stdin] [flags]
       catena user del NAME [flags]
       catena user passwd NAME (-password-file FILE | -password-stdin | -no-password) [flags]
       catena user grant NAME ROLE [flags]
       catena user revoke NAME ROLE [flags]
       catena user list [-json] [flags]`

const roleSynopsis = `catena role add NAME [flags]
       catena role del NAME [flags]
       catena role grant NAME (-keyspace KEYSPACE | -prefix PREFIX) -access read|readwrite [flags]
       catena role revoke NAME (-keyspace KEYSPACE | -prefix PREFIX) [flags]
       catena role list [-json] [flags]`

// authArity is the number of arguments each verb takes.
var authArity = map[string]map[string]int{
	"user": {"add": 1, "del": 1, "passwd": 1, "grant": 2, "revoke": 2, "list": 0},
	"role": {"add": 1, "del": 1, "grant": 1, "revoke": 1, "list": 0},
}

// runAuth manages users (what = "user") and roles ("role"): kept in
// the master's replicated state, checked by every server at every
// request once a user exists (docs/operations.md, "Users and roles").
func runAuth(what string, args []string, stdin io.Reader, stdout io.Writer) error {
	synopsis := map[string]string{"user": userSynopsis, "role": roleSynopsis}[what]
	verbs := authArity[what]
	if len(args) > 0 && cli.IsHelp(args[0]) {
		args = []string{"list", "-h"} // every verb's usage is the command's
	}
	if len(args) == 0 || verbs[args[0]] == 0 && args[0] != "list" {
		return cli.UsageErrorf("want one of add, del, %slist (usage: %s)", map[string]string{"user": "passwd, grant, revoke, ", "role": "grant, revoke, "}[what], synopsis)
	}
	verb := args[0]
	fs := cli.NewFlagSet(what, synopsis, `Users and roles, kept by the master. Once a user exists, authorization is
on: every request runs as a user (the client certificate's name, or the
Redis user a proxy's connection authenticated as) and each server allows
it only if one of the user's roles grants it: read, or readwrite, on a
keyspace or on the keys with a prefix (-prefix '' is every key). Role
admin is built in: it allows everything, and changing users, roles and
keyspaces. The first user must be this client's own certificate user,
with role admin; the last user with role admin cannot be deleted nor
lose it. A password (for the Redis protocol's AUTH) is hashed here with
argon2id: it never leaves this machine. See docs/operations.md.`)
	cluster := registerClientFlags(fs)
	asJSON := fs.Bool("json", false, "list: print JSON")
	var roles, passwordFile, keyspace, prefix, access string
	var passwordStdin, noPassword bool
	if what == "user" {
		fs.StringVar(&roles, "roles", "", "add: comma-separated roles the user holds ("+client.AdminRole+": everything)")
		fs.StringVar(&passwordFile, "password-file", "", "add, passwd: a file whose first line is the user's password (for the Redis protocol's AUTH)")
		fs.BoolVar(&passwordStdin, "password-stdin", false, "add, passwd: read the password from the first line of standard input")
		fs.BoolVar(&noPassword, "no-password", false, "passwd: remove the user's password (it authenticates with a certificate only)")
	} else {
		fs.StringVar(&keyspace, "keyspace", "", "grant, revoke: the keyspace whose keys the grant covers")
		fs.StringVar(&prefix, "prefix", "", "grant, revoke: the key prefix the grant covers ('': every key)")
		fs.StringVar(&access, "access", "", "grant: read or readwrite")
	}
	args, err := cli.ParseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if len(args) != verbs[verb] {
		return cli.UsageErrorf("%s %s wants %d argument(s), got %d (usage: %s)", what, verb, verbs[verb], len(args), synopsis)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	password, err := authPassword(verb, passwordFile, passwordStdin, noPassword, stdin)
	if err != nil {
		return err
	}
	var grant client.Grant
	if what == "role" && (verb == "grant" || verb == "revoke") {
		switch {
		case given["keyspace"] == given["prefix"]:
			return cli.UsageErrorf("role %s needs -keyspace or -prefix (one of them)", verb)
		case verb == "grant" && access == "":
			return cli.UsageErrorf("role grant needs -access read or readwrite")
		case verb == "revoke" && given["access"]:
			return cli.UsageErrorf("role revoke takes no -access: it removes the grant on those keys")
		}
		grant = client.Grant{Keyspace: keyspace, Prefix: prefix, Access: access}
	} else if given["keyspace"] || given["prefix"] || given["access"] {
		return cli.UsageErrorf("-keyspace, -prefix and -access are for role grant and role revoke")
	}
	if given["roles"] && verb != "add" {
		return cli.UsageErrorf("-roles is for user add (user grant gives a role)")
	}
	ctx, cancel := cluster.context()
	defer cancel()
	c, err := cluster.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var auth client.Auth
	switch what + " " + verb {
	case "user add":
		auth, err = c.AddUser(ctx, args[0], password, splitList(roles)...)
	case "user del":
		auth, err = c.DeleteUser(ctx, args[0])
	case "user passwd":
		auth, err = c.SetPassword(ctx, args[0], password)
	case "user grant":
		auth, err = c.GrantUser(ctx, args[0], args[1])
	case "user revoke":
		auth, err = c.RevokeUser(ctx, args[0], args[1])
	case "role add":
		auth, err = c.AddRole(ctx, args[0])
	case "role del":
		auth, err = c.DeleteRole(ctx, args[0])
	case "role grant":
		auth, err = c.GrantRole(ctx, args[0], grant)
	case "role revoke":
		auth, err = c.RevokeRole(ctx, args[0], grant)
	default:
		auth, err = c.Auth(ctx)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, auth)
	}
	printAuth(stdout, auth)
	return nil
}

// authPassword returns the password a verb is given, or why its flags
// are wrong.
func authPassword(verb, file string, fromStdin, none bool, stdin io.Reader) (string, error) {
	n := 0
	for _, set := range []bool{file != "", fromStdin, none} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return "", cli.UsageErrorf("give one of -password-file, -password-stdin and -no-password")
	case verb != "add" && verb != "passwd" && n > 0:
		return "", cli.UsageErrorf("-password-file, -password-stdin and -no-password are for user add and user passwd")
	case verb == "passwd" && n == 0:
		return "", cli.UsageErrorf("user passwd needs -password-file, -password-stdin or -no-password")
	case verb == "add" && none:
		return "", cli.UsageErrorf("-no-password is for user passwd (user add without a password flag makes a user without one)")
	case file != "":
		return readPassword(file)
	case fromStdin:
		line, err := bufio.NewReader(stdin).ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if err != nil && err != io.EOF {
				return "", err
			}
			return "", cli.UsageErrorf("-password-stdin: the first line of standard input is empty")
		}
		return line, nil
	}
	return "", nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// printAuth prints the users and roles as two tables.
func printAuth(w io.Writer, a client.Auth) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tROLES\tPASSWORD")
	for _, u := range a.Users {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", u.Name, orDash(strings.Join(u.Roles, ",")), orDash(u.Password))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tGRANTS")
	fmt.Fprintf(tw, "%s\t%s\n", client.AdminRole, "every key: readwrite; users, roles, keyspaces (built in)")
	for _, r := range a.Roles {
		var grants []string
		for _, g := range r.Grants {
			target := fmt.Sprintf("prefix %q", g.Prefix)
			switch {
			case g.Keyspace != "":
				target = "keyspace " + g.Keyspace
			case g.Prefix == "":
				target = "every key"
			}
			grants = append(grants, target+": "+g.Access)
		}
		fmt.Fprintf(tw, "%s\t%s\n", r.Name, orDash(strings.Join(grants, "; ")))
	}
	tw.Flush()
	if len(a.Users) == 0 {
		fmt.Fprintln(w, "\nNo users: authorization is off (every client may read and write every key).")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printJSON prints v as indented JSON, ending in a newline (a command's
// -json).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
