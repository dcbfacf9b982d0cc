// Command fenced-postgres takes a lock through lockproxy and writes to a
// PostgreSQL row only if its fencing token is not older than the last one
// the row accepted: a holder that stalled past its lease (GC, swap,
// SIGSTOP) and writes late is refused by the database, not by the lock.
//
// The proxy must run with fencing = true (-fencing). The table, created if
// absent:
//
//	CREATE TABLE IF NOT EXISTS resource (
//		id    BIGINT PRIMARY KEY,
//		data  TEXT   NOT NULL,
//		fence BIGINT NOT NULL
//	)
//
// It prints "acquired token=N", then "write accepted token=N" or
// "write refused token=N", then whether the release found the lock still
// held. Exit codes: 0 write accepted, 1 error, 2 lock not acquired (held by
// another token), 3 write refused by the fence.
//
//	go run ./examples/fenced-postgres -proxy 127.0.0.1:7379 \
//		-dsn 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' \
//		-key resource:1 -id 1 -data hello
//
// A proxy that requires a password (password, users) or serves TLS
// (tls_listen) is reached as the proxy reaches its backends: -proxy takes
// host:port or a redis:// or rediss:// URL (user and password in it), and
// the flags -user, -password, -password-file, -tls, -tls-ca-cert-file,
// -tls-cert-file, -tls-key-file and -tls-server-name mirror the proxy's
// backend_tls_* keys. The password may come from REDISCLI_AUTH, as
// redis-cli takes it, to keep it out of the process list:
//
//	REDISCLI_AUTH=s3cret go run ./examples/fenced-postgres \
//		-proxy 10.0.0.5:7380 -tls-ca-cert-file ca.pem -key resource:1
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

const schema = `CREATE TABLE IF NOT EXISTS resource (
	id    BIGINT PRIMARY KEY,
	data  TEXT   NOT NULL,
	fence BIGINT NOT NULL
)`

// fencedWrite is the one statement that makes the fence work: the token
// check and the write are atomic, so no writer with an older token can
// slip in between. <= rather than <: the same holder may write again with
// its token (an extension keeps it).
const fencedWrite = `INSERT INTO resource (id, data, fence) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data, fence = EXCLUDED.fence
WHERE resource.fence <= EXCLUDED.fence`

// unfencedWrite is the wrong way, kept to show what the fence prevents: a
// late holder overwrites whatever the next holder wrote.
const unfencedWrite = `INSERT INTO resource (id, data, fence) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data, fence = EXCLUDED.fence`

// release deletes the lock only while token still holds it, so that a
// holder whose lease ran out cannot delete the next holder's lock.
var release = redis.NewScript(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)

const (
	exitAccepted = 0
	exitError    = 1
	exitNotHeld  = 2
	exitRefused  = 3
)

// clientFlags are how the example reaches the proxy: the options of the
// proxy's own client side (its backends' URLs and backend_tls_* keys).
type clientFlags struct {
	proxy, user, password, passwordFile string
	tls                                 bool
	caCertFile, certFile, keyFile       string
	serverName                          string
}

func main() {
	var cf clientFlags
	flag.StringVar(&cf.proxy, "proxy", "127.0.0.1:7379", "lockproxy `address` (host:port), or a redis:// or rediss:// URL with user and password in it")
	flag.StringVar(&cf.user, "user", "", "user to AUTH as (the proxy's users); empty: the default user")
	flag.StringVar(&cf.password, "password", "", "password to AUTH with (the proxy's password); empty: $REDISCLI_AUTH, else none")
	flag.StringVar(&cf.passwordFile, "password-file", "", "file holding the password (a final newline is dropped)")
	flag.BoolVar(&cf.tls, "tls", false, "connect over TLS (the proxy's tls_listen); implied by rediss:// and by any -tls-* flag")
	flag.StringVar(&cf.caCertFile, "tls-ca-cert-file", "", "PEM CAs that sign the proxy's certificate; empty: the system's")
	flag.StringVar(&cf.certFile, "tls-cert-file", "", "PEM client certificate, for a proxy with tls_ca_cert_file (mutual TLS)")
	flag.StringVar(&cf.keyFile, "tls-key-file", "", "PEM private key of -tls-cert-file")
	flag.StringVar(&cf.serverName, "tls-server-name", "", "name the proxy's certificate must hold; empty: the host of -proxy")
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL connection string")
	key := flag.String("key", "resource:1", "lock key")
	id := flag.Int64("id", 1, "id of the resource row to write")
	ttl := flag.Duration("ttl", 10*time.Second, "lock TTL")
	data := flag.String("data", "hello", "what to write")
	wait := flag.Bool("wait-before-write", false, "after acquiring, wait for a line on stdin before writing (lets a test pause the holder there)")
	unfenced := flag.Bool("unfenced", false, "write without the fence check: the WRONG way, for comparison")
	flag.Parse()
	opts, err := cf.options()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitError)
	}
	os.Exit(run(opts, *dsn, *key, *id, *ttl, *data, *wait, *unfenced))
}

// options are the go-redis options of the proxy that cf names.
func (cf clientFlags) options() (*redis.Options, error) {
	opts := &redis.Options{Addr: cf.proxy}
	if strings.Contains(cf.proxy, "://") {
		var err error
		if opts, err = redis.ParseURL(cf.proxy); err != nil {
			return nil, fmt.Errorf("-proxy: %w", err)
		}
	}
	if cf.user != "" {
		opts.Username = cf.user
	}
	switch {
	case cf.password != "" && cf.passwordFile != "":
		return nil, errors.New("-password, -password-file: both set; set one")
	case cf.passwordFile != "":
		b, err := os.ReadFile(cf.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("-password-file: %w", err)
		}
		opts.Password = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	case cf.password != "":
		opts.Password = cf.password
	case opts.Password == "":
		opts.Password = os.Getenv("REDISCLI_AUTH")
	}
	if !cf.tls && opts.TLSConfig == nil && cf.caCertFile == "" && cf.certFile == "" && cf.keyFile == "" && cf.serverName == "" {
		return opts, nil
	}
	if opts.TLSConfig == nil {
		opts.TLSConfig = &tls.Config{}
	}
	c := opts.TLSConfig
	c.MinVersion = tls.VersionTLS12
	if cf.serverName != "" {
		c.ServerName = cf.serverName
	}
	if cf.caCertFile != "" {
		pem, err := os.ReadFile(cf.caCertFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca-cert-file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca-cert-file: no PEM certificate in %s", cf.caCertFile)
		}
	}
	if (cf.certFile == "") != (cf.keyFile == "") {
		return nil, errors.New("-tls-cert-file, -tls-key-file: set both or neither")
	}
	if cf.certFile != "" {
		cert, err := tls.LoadX509KeyPair(cf.certFile, cf.keyFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert-file, -tls-key-file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return opts, nil
}

func run(opts *redis.Options, dsn, key string, id int64, ttl time.Duration, data string, wait, unfenced bool) int {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "postgres:", err)
		return exitError
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, schema); err != nil {
		fmt.Fprintln(os.Stderr, "create table:", err)
		return exitError
	}

	// With it, LOCK.ACQUIRE answers the lock's fencing token instead of OK.
	opts.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		return cn.Do(ctx, "CLIENT", "FENCING", "ON").Err()
	}
	// A retried acquisition would find this token's own lock and answer nil.
	opts.MaxRetries = -1
	rdb := redis.NewClient(opts)
	defer rdb.Close()

	token := rand.Text()
	fence, err := rdb.Do(ctx, "LOCK.ACQUIRE", key, token, "PX", ttl.Milliseconds()).Int64()
	if errors.Is(err, redis.Nil) {
		fmt.Println("not acquired: another token holds", key)
		return exitNotHeld
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "acquire:", err)
		return exitError
	}
	fmt.Printf("acquired token=%d\n", fence)

	if wait {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "wait-before-write:", err)
			return exitError
		}
	}

	stmt := fencedWrite
	if unfenced {
		stmt = unfencedWrite
	}
	tag, err := db.Exec(ctx, stmt, id, data, fence)
	if err != nil {
		fmt.Fprintln(os.Stderr, "write:", err)
		return exitError
	}
	code := exitAccepted
	if tag.RowsAffected() == 1 {
		fmt.Printf("write accepted token=%d\n", fence)
	} else {
		fmt.Printf("write refused token=%d: the row has a newer token\n", fence)
		code = exitRefused
	}

	// Released whatever the write's outcome: the lock is no use any more.
	switch n, err := release.Run(ctx, rdb, []string{key}, token).Int64(); {
	case err != nil:
		fmt.Fprintln(os.Stderr, "release:", err)
	case n == 1:
		fmt.Println("released")
	default:
		fmt.Println("not released: the lock had expired")
	}
	return code
}
