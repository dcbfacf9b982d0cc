package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// clients will dial it.
func checkClusterNodes(nodes []string) error {
	for i, n := range nodes {
		host, port, err := net.SplitHostPort(n)
		if p, perr := strconv.Atoi(port); err != nil || perr != nil || host == "" || p < 1 || p > 65535 {
			return fmt.Errorf("entry %d (%q) is not host:port with a port from 1 to 65535, as clients reach that lockproxy", i+1, n)
		}
		if slices.Index(nodes, n) < i {
			return fmt.Errorf("entry %d (%s) is named twice", i+1, n)
		}
	}
	return nil
}

// checkBackends reads each backend URL as lockproxy uses it, and says what
// is wrong in plain words with what to write instead, where go-redis's
// parser would answer in its own terms ("first path segment in URL cannot
// contain colon", "unexpected option"). An entry is named by its position
// and its host, never by the whole URL, which may hold a password.
// A server listed twice is refused here, before anything is dialled,
// where the engine would tell it by its run_id only once connected.
func checkBackends(urls []string) error {
	seen := map[string]int{}
	for i, raw := range urls {
		if err := checkBackend(raw); err != nil {
			return fmt.Errorf("entry %d (%s): %w", i+1, backendName(raw), err)
		}
		server := backendServer(raw)
		if j, ok := seen[server]; ok {
			return fmt.Errorf("entry %d (%s) is entry %d again: list each Redis master once, as one server listed twice would have two votes", i+1, cmp.Or(backendName(raw), server), j+1)
		}
		seen[server] = i
	}
	return nil
}

// backendServer is what names the server of a backend URL that
// checkBackend took: its host and port (Redis's 6379 when none is
// written), in small letters, or its socket's path. The database and the
// credentials are left out: two of a server's databases are one server.
func backendServer(raw string) string {
	scheme, rest, _ := strings.Cut(raw, "://")
	if strings.EqualFold(scheme, "unix") {
		path, _, _ := strings.Cut(rest, "?")
		return "unix:" + path
	}
	h := strings.ToLower(hostPart(rest))
	if _, _, err := net.SplitHostPort(h); err != nil {
		h = net.JoinHostPort(strings.Trim(h, "[]"), "6379")
	}
	return h
}

// backendQueryOptions are the options of a backend URL that lockproxy
// uses; go-redis takes more (pool_size, read_timeout...), which lockproxy
// would silently ignore, since it makes its own connections.
var backendQueryOptions = []string{"db", "skip_verify"}

func checkBackend(raw string) error {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return fmt.Errorf("no scheme: write redis://%s (rediss:// for TLS)", safeHost(hostPart(raw)))
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss":
	case "unix":
		return nil // a socket path: go-redis's parser words its few mistakes well
	default:
		return fmt.Errorf("%s:// is not a Redis scheme: write redis://%s (rediss:// for TLS, unix:// for a socket)", scheme, safeHost(hostPart(rest)))
	}
	if h := hostPart(rest); h != "" {
		if _, port, err := net.SplitHostPort(h); err == nil {
			switch n, err := strconv.Atoi(port); {
			case err != nil: // not echoed: perhaps a password in the wrong place
				return fmt.Errorf("the port is not a number; a password goes before the host: %s://:PASSWORD@host:6379", scheme)
			case n < 1 || n > 65535:
				return fmt.Errorf("port %d is out of range: a port is 1 to 65535 (Redis's own is 6379)", n)
			}
		} else if !strings.Contains(err.Error(), "missing port") {
			return fmt.Errorf("more than host:port after the host; a password goes before it: %s://:PASSWORD@host:6379", scheme)
		}
	}
	// url's own errors quote the text they stumbled on, which may be a
	// password: they are not passed on.
	escapes := fmt.Sprintf(`write %s://[user:password@]host:port[/db], with a password's "/", "?", "#", "@" and "%%" as %%2F, %%3F, %%23, %%40 and %%25`, scheme)
	u, err := url.Parse(raw)
	if err != nil || strings.Contains(raw, "@") && u.Host != hostPart(rest) {
		return errors.New("not a URL as written: " + escapes)
	}
	if u.Fragment != "" || strings.HasSuffix(raw, "#") {
		return errors.New(`a "#" ends the URL there: write it %23 (in a password, say)`)
	}
	if u.User != nil {
		if _, ok := u.User.Password(); !ok {
			return fmt.Errorf("a user name but no password: a password alone is written %s://:PASSWORD@host:port (with the colon)", scheme)
		}
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 0 {
			return fmt.Errorf("database %q is not a number: end the URL with /0, /1... or leave the database out (0)", p)
		}
	}
	for name := range u.Query() {
		switch {
		case slices.Contains(backendQueryOptions, name):
		case name == "password" || name == "user" || name == "username":
			return fmt.Errorf("option %s: the user and password go before the host: %s://USER:PASSWORD@host:port, or %s://:PASSWORD@host:port", name, scheme, scheme)
		default:
			return fmt.Errorf("option %q is not used: a backend URL takes %s; the timeout is backend_timeout", name, orList(backendQueryOptions))
		}
	}
	return nil
}

// hostPart is the host:port of the rest of a URL after its scheme: what
// follows the last "@", up to the path, query or fragment. The last "@":
// a password's own "/", "?" or "#" left unescaped must not make it part
// of the host.
func hostPart(rest string) string {
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// backendName names a backend URL in an error by its host and port,
// which hold no secret.
func backendName(raw string) string {
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		raw = rest
	}
	return safeHost(hostPart(raw))
}

// safeHost is h when it is a host or host:port with a numeric port, and
// its host alone otherwise: what follows a second ":" may be a password
// put in the wrong place.
func safeHost(h string) string {
	host, port, err := net.SplitHostPort(h)
	switch {
	case err == nil && strings.Trim(port, "0123456789") == "":
		return h
	case err == nil:
		return host
	case strings.Contains(err.Error(), "missing port"):
		return h
	}
	host, _, _ = strings.Cut(h, ":")
	return host
}
