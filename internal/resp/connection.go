package resp

import (
	"crypto/subtle"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/catena-kv/catena/client"
)

// The connection commands run in the reader goroutine, in order with the
// commands around them: a command read after CLIENT CONSISTENCY or HELLO
// runs with what they set.

func localPing(c *conn, args [][]byte, r *reply) bool {
	switch len(args) {
	case 1:
		r.status("PONG")
	case 2:
		r.bulk(args[1])
	default:
		r.err(wrongArity("ping"))
	}
	return true
}

func localEcho(c *conn, args [][]byte, r *reply) bool {
	r.bulk(args[1])
	return true
}

func localQuit(c *conn, args [][]byte, r *reply) bool {
	r.ok()
	return false
}

func localSelect(c *conn, args [][]byte, r *reply) bool {
	switch n, ok := parseInt(args[1]); {
	case !ok:
		r.err(errNotInteger)
	case n != 0:
		r.err("ERR DB index is out of range (Catena has one database, 0)")
	default:
		r.ok()
	}
	return true
}

// Authentication's error replies, Redis's.
const (
	errNoAuth    = "NOAUTH Authentication required."
	errWrongPass = "WRONGPASS invalid username-password pair or user is disabled."
	errNoPassSet = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	// errNoPerm is Redis's reply to a command on a key its user may
	// not access; errNoAuthUser Catena's when the cluster does not know
	// the connection's user (deleted since it authenticated, or the
	// proxy's own user is none of the cluster's).
	errNoPerm     = "NOPERM this user has no permissions to access one of the keys used as arguments"
	errNoAuthUser = "NOAUTH Authentication required: this connection's user is not a user of the cluster (AUTH username password)"
	errHelloAuth  = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
)

// authenticate checks a user name and password: the "default" user with
// Options.Password (any password when none is set), whose commands run
// as the proxy's own user; any other with Options.Users (the cluster's
// users), whose commands then run as that user. A failure is logged.
func (c *conn) authenticate(user, password []byte) bool {
	name, ok := string(user), false
	switch want := c.s.opts.Password; {
	case name == "default":
		ok = want == "" || subtle.ConstantTimeCompare([]byte(want), password) == 1
	case c.s.opts.Users != nil:
		ok = c.s.opts.Users.Authenticate(name, string(password))
	}
	if ok {
		c.authenticated = true
		c.user, c.ctx = "", c.s.ctx
		if name != "default" {
			c.user, c.ctx = name, client.WithUser(c.s.ctx, name)
		}
	} else {
		c.s.opts.Logger.Warn("resp: authentication failed", "remote", c.nc.RemoteAddr().String(), "user", truncate(user))
	}
	return ok
}

// localAuth answers AUTH [username] password.
func localAuth(c *conn, args [][]byte, r *reply) bool {
	user, password := []byte("default"), args[1]
	switch len(args) {
	case 2:
		if c.s.opts.Password == "" {
			r.err(errNoPassSet)
			return true
		}
	case 3:
		user, password = args[1], args[2]
	default:
		r.err(errSyntax)
		return true
	}
	if !c.authenticate(user, password) {
		r.err(errWrongPass)
		return true
	}
	r.ok()
	return true
}

// localHello answers HELLO [protover [AUTH username password] [SETNAME
// clientname]]. The one user is Redis's "default", whose password is
// Options.Password (none: any password).
func localHello(c *conn, args [][]byte, r *reply) bool {
	resp3 := c.resp3
	name, setName := "", false
	if len(args) > 1 {
		v, ok := parseInt(args[1])
		switch {
		case !ok:
			r.err("ERR Protocol version is not an integer or out of range")
			return true
		case v != 2 && v != 3:
			r.err("NOPROTO unsupported protocol version")
			return true
		}
		resp3 = v == 3
	}
	for i := 2; i < len(args); i++ {
		more := len(args) - 1 - i
		switch opt := strings.ToUpper(string(args[i])); {
		case opt == "AUTH" && more >= 2:
			if !c.authenticate(args[i+1], args[i+2]) {
				r.err(errWrongPass)
				return true
			}
			i += 2
		case opt == "SETNAME" && more >= 1:
			if !validName(args[i+1]) {
				r.err(errBadName)
				return true
			}
			name, setName = string(args[i+1]), true
			i++
		default:
			r.err(fmt.Sprintf("ERR Syntax error in HELLO option '%s'", truncate(args[i])))
			return true
		}
	}
	if !c.authenticated {
		r.err(errHelloAuth)
		return true
	}
	c.resp3, r.resp3 = resp3, resp3
	if setName {
		c.name = name
	}
	proto := int64(2)
	if resp3 {
		proto = 3
	}
	r.mapOf(7)
	r.bulkString("server")
	r.bulkString("redis")
	r.bulkString("version")
	r.bulkString(RedisVersion)
	r.bulkString("proto")
	r.int(proto)
	r.bulkString("id")
	r.int(c.id)
	r.bulkString("mode")
	r.bulkString("standalone")
	r.bulkString("role")
	r.bulkString("master")
	r.bulkString("modules")
	r.array(0)
	return true
}

const errBadName = "ERR Client names cannot contain spaces, newlines or special characters."

// validName reports whether a client name (or library name) is printable
// ASCII without spaces, as Redis requires.
func validName(b []byte) bool {
	for _, c := range b {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// clientHelp is CLIENT HELP's text.
var clientHelp = []string{
	"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"CONSISTENCY [STRONG|ANY-MEMBER]",
	"    Catena: return, or set, which replicas answer this connection's reads:",
	"    strong (the chain's tail) or any-member (CRAQ). Both are linearizable.",
	"GETNAME",
	"    Return the name of the current connection.",
	"ID",
	"    Return the ID of the current connection.",
	"INFO",
	"    Return information about the current client connection.",
	"SETINFO <option> <value>",
	"    Set client meta attr. Options are LIB-NAME and LIB-VER.",
	"SETNAME <name>",
	"    Assign the name <name> to the current connection.",
	"HELP",
	"    Print this help.",
}

func localClient(c *conn, args [][]byte, r *reply) bool {
	sub := strings.ToLower(string(args[1]))
	// Arity as Redis counts it, CLIENT included; -2: 2 or 3.
	arity := map[string]int{"consistency": -2, "getname": 2, "id": 2, "info": 2, "setinfo": 4, "setname": 3, "help": 2}
	want, known := arity[sub]
	switch {
	case !known:
		r.err(fmt.Sprintf("ERR unknown subcommand '%s'. Try CLIENT HELP.", truncate(args[1])))
		return true
	case want >= 0 && len(args) != want, want < 0 && (len(args) < -want || len(args) > -want+1):
		r.err(wrongArity("client|" + sub))
		return true
	}
	switch sub {
	case "consistency":
		if len(args) == 2 {
			r.bulkString(consistencyName(c.consistency))
			break
		}
		switch strings.ToLower(string(args[2])) {
		case "strong":
			c.consistency = client.Strong
		case "any-member":
			c.consistency = client.AnyMember
		default:
			r.err(fmt.Sprintf("ERR unknown consistency '%s' (want strong or any-member)", truncate(args[2])))
			return true
		}
		r.ok()
	case "getname":
		if c.name == "" {
			r.null()
		} else {
			r.bulkString(c.name)
		}
	case "id":
		r.int(c.id)
	case "info":
		r.bulkString(c.info())
	case "setinfo":
		if !validName(args[3]) {
			r.err("ERR lib-name and lib-ver cannot contain spaces, newlines or special characters.")
			return true
		}
		switch strings.ToLower(string(args[2])) {
		case "lib-name":
			c.libName = string(args[3])
		case "lib-ver":
			c.libVersion = string(args[3])
		default:
			r.err(fmt.Sprintf("ERR Unrecognized option '%s'", truncate(args[2])))
			return true
		}
		r.ok()
	case "setname":
		if !validName(args[2]) {
			r.err(errBadName)
			return true
		}
		c.name = string(args[2])
		r.ok()
	case "help":
		r.array(len(clientHelp))
		for _, l := range clientHelp {
			r.status(l)
		}
	}
	return true
}

func consistencyName(c client.Consistency) string {
	if c == client.AnyMember {
		return "any-member"
	}
	return "strong"
}

// info is CLIENT INFO's line: Redis's fields that mean something here,
// and Catena's consistency.
func (c *conn) info() string {
	resp := 2
	if c.resp3 {
		resp = 3
	}
	user := c.user
	if user == "" {
		user = "default"
	}
	return fmt.Sprintf("id=%d addr=%s laddr=%s name=%s age=%d db=0 cmd=client|info user=%s lib-name=%s lib-ver=%s resp=%d catena-consistency=%s\n",
		c.id, c.nc.RemoteAddr(), c.nc.LocalAddr(), c.name, int64(time.Since(c.created).Seconds()), user,
		c.libName, c.libVersion, resp, consistencyName(c.consistency))
}

// localInfo answers INFO [section ...] with the sections Redis users
// look for (server, clients, stats), in Redis's format, the server
// section carrying Catena's own fields too.
func localInfo(c *conn, args [][]byte, r *reply) bool {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := len(want) == 0 || want["all"] || want["default"] || want["everything"]
	s := c.s
	var b strings.Builder
	section := func(name string, fields ...string) {
		if !all && !want[strings.ToLower(name)] {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		fmt.Fprintf(&b, "# %s\r\n", name)
		for i := 0; i+1 < len(fields); i += 2 {
			fmt.Fprintf(&b, "%s:%s\r\n", fields[i], fields[i+1])
		}
	}
	port := ""
	if a, ok := c.nc.LocalAddr().(*net.TCPAddr); ok {
		port = strconv.Itoa(a.Port)
	}
	exe, _ := os.Executable()
	uptime := time.Since(s.started)
	section("Server",
		"redis_version", RedisVersion,
		"redis_mode", "standalone",
		"os", runtime.GOOS+" "+runtime.GOARCH,
		"arch_bits", strconv.Itoa(strconv.IntSize),
		"process_id", strconv.Itoa(os.Getpid()),
		"run_id", s.runID,
		"tcp_port", port,
		"server_time_usec", strconv.FormatInt(time.Now().UnixMicro(), 10),
		"uptime_in_seconds", strconv.FormatInt(int64(uptime.Seconds()), 10),
		"uptime_in_days", strconv.FormatInt(int64(uptime.Hours()/24), 10),
		"executable", exe,
		"catena_version", s.opts.Version,
		"catena_masters", s.opts.Masters,
		"catena_consistency_default", consistencyName(s.opts.Consistency),
	)
	section("Clients",
		"connected_clients", strconv.Itoa(s.connections()),
		"maxclients", strconv.Itoa(s.opts.ConnectionsMax),
	)
	section("Stats",
		"total_connections_received", strconv.FormatInt(s.connectionsTotal.Load(), 10),
		"total_commands_processed", strconv.FormatInt(s.commandsTotal.Load(), 10),
		"rejected_connections", strconv.FormatInt(s.rejectedTotal.Load(), 10),
	)
	r.bulkString(b.String())
	return true
}

// localCommand answers COMMAND, COMMAND COUNT, COMMAND LIST, COMMAND INFO
// [name ...] and COMMAND DOCS [name ...], in Redis 7's formats.
func localCommand(c *conn, args [][]byte, r *reply) bool {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	sub := ""
	if len(args) > 1 {
		sub = strings.ToLower(string(args[1]))
	}
	switch sub {
	case "":
		r.array(len(names))
		for _, n := range names {
			commandInfo(r, commands[n])
		}
	case "count":
		if len(args) != 2 {
			r.err(wrongArity("command|count"))
			break
		}
		r.int(int64(len(names)))
	case "list":
		r.array(len(names))
		for _, n := range names {
			r.bulkString(n)
		}
	case "info":
		if len(args) > 2 {
			names = names[:0]
			for _, a := range args[2:] {
				names = append(names, strings.ToLower(string(a)))
			}
		}
		r.array(len(names))
		for _, n := range names {
			if cmd, ok := commands[n]; ok {
				commandInfo(r, cmd)
			} else {
				r.null()
			}
		}
	case "docs":
		if len(args) > 2 {
			names = names[:0]
			for _, a := range args[2:] {
				if n := strings.ToLower(string(a)); commands[n] != nil {
					names = append(names, n)
				}
			}
		}
		r.mapOf(len(names))
		for _, n := range names {
			cmd := commands[n]
			r.bulkString(n)
			r.mapOf(4)
			r.bulkString("summary")
			r.bulkString(cmd.summary)
			r.bulkString("since")
			r.bulkString(cmd.since)
			r.bulkString("group")
			r.bulkString(cmd.group)
			r.bulkString("complexity")
			r.bulkString(cmd.complexity)
		}
	case "help":
		help := []string{
			"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"(no subcommand)", "    Return details about all commands.",
			"COUNT", "    Return the total number of commands.",
			"DOCS [<command-name> ...]", "    Return documentation details about multiple commands.",
			"INFO [<command-name> ...]", "    Return details about multiple commands.",
			"LIST", "    Return a list of all commands.",
			"HELP", "    Print this help.",
		}
		r.array(len(help))
		for _, l := range help {
			r.status(l)
		}
	default:
		r.err(fmt.Sprintf("ERR unknown subcommand '%s'. Try COMMAND HELP.", truncate(args[1])))
	}
	return true
}

// commandInfo writes one command's COMMAND INFO entry: name, arity,
// flags, first key, last key, step, ACL categories, tips, key
// specifications, subcommands.
func commandInfo(r *reply, cmd *command) {
	r.array(10)
	r.bulkString(cmd.name)
	r.int(int64(cmd.arity))
	r.array(len(cmd.flags))
	for _, f := range cmd.flags {
		r.status(f)
	}
	r.int(int64(cmd.firstKey))
	r.int(int64(cmd.lastKey))
	r.int(int64(cmd.step))
	r.array(1)
	r.status("@" + cmd.group)
	r.array(0)
	r.array(0)
	r.array(0)
}
