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
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
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

func main() {
	proxy := flag.String("proxy", "127.0.0.1:7379", "lockproxy `address`")
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL connection string")
	key := flag.String("key", "resource:1", "lock key")
	id := flag.Int64("id", 1, "id of the resource row to write")
	ttl := flag.Duration("ttl", 10*time.Second, "lock TTL")
	data := flag.String("data", "hello", "what to write")
	wait := flag.Bool("wait-before-write", false, "after acquiring, wait for a line on stdin before writing (lets a test pause the holder there)")
	unfenced := flag.Bool("unfenced", false, "write without the fence check: the WRONG way, for comparison")
	flag.Parse()
	os.Exit(run(*proxy, *dsn, *key, *id, *ttl, *data, *wait, *unfenced))
}

func run(proxy, dsn, key string, id int64, ttl time.Duration, data string, wait, unfenced bool) int {
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

	rdb := redis.NewClient(&redis.Options{
		Addr: proxy,
		// With it, LOCK.ACQUIRE answers the lock's fencing token instead of OK.
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.Do(ctx, "CLIENT", "FENCING", "ON").Err()
		},
		// A retried acquisition would find this token's own lock and answer nil.
		MaxRetries: -1,
	})
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
