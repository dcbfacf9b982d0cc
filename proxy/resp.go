package proxy

import (
	"strconv"

	"github.com/tidwall/redcon"
)

// redcon writes RESP2 only; these helpers add the RESP3 forms that a
// connection gets after HELLO 3 (redis-py 8 and redlock-rb 2 require it).

var resp3Null = []byte("_\r\n")

// writeNull writes a null: "_" in RESP3, the null bulk "$-1" in RESP2.
func writeNull(conn redcon.Conn) {
	if state(conn).proto == 3 {
		conn.WriteRaw(resp3Null)
		return
	}
	conn.WriteNull()
}

// writeNullArray writes the nil array ("*-1" in RESP2, "_" in RESP3), as
// Redis answers an EXEC whose watched key changed.
func writeNullArray(conn redcon.Conn) {
	if state(conn).proto == 3 {
		conn.WriteRaw(resp3Null)
		return
	}
	conn.WriteRaw(resp2NullArray)
}

var resp2NullArray = []byte("*-1\r\n")

// writeMapLen starts a map of n pairs: "%n" in RESP3, a flat array of 2n
// elements in RESP2, as Redis sends HELLO and CONFIG GET.
func writeMapLen(conn redcon.Conn, n int) {
	if state(conn).proto == 3 {
		conn.WriteRaw(strconv.AppendInt([]byte{'%'}, int64(n), 10))
		conn.WriteRaw([]byte("\r\n"))
		return
	}
	conn.WriteArray(2 * n)
}

// writeBool writes the :1/:0 integer replies of EXPIRE, DELEX and scripts.
func writeBool(conn redcon.Conn, ok bool) {
	if ok {
		conn.WriteInt(1)
		return
	}
	conn.WriteInt(0)
}

// statusOK is a script result replied as the status "+OK".
type statusOK struct{}

// writeValue writes a script result the way Redis converts Lua values:
// numbers as integers, false/nil as null, status tables as status replies,
// other tables as arrays.
func writeValue(conn redcon.Conn, v any) {
	switch v := v.(type) {
	case int64:
		conn.WriteInt64(v)
	case string:
		conn.WriteBulkString(v)
	case statusOK:
		conn.WriteString("OK")
	case []any:
		conn.WriteArray(len(v))
		for _, e := range v {
			writeValue(conn, e)
		}
	default:
		writeNull(conn)
	}
}

// replies appends replies to out: the Write methods of a redcon.Conn, for
// the connections that send replies when they choose (client) or keep them
// (replyBuffer).
type replies struct{ out []byte }

func (r *replies) WriteError(msg string)       { r.out = redcon.AppendError(r.out, msg) }
func (r *replies) WriteString(str string)      { r.out = redcon.AppendString(r.out, str) }
func (r *replies) WriteBulk(bulk []byte)       { r.out = redcon.AppendBulk(r.out, bulk) }
func (r *replies) WriteBulkString(bulk string) { r.out = redcon.AppendBulkString(r.out, bulk) }
func (r *replies) WriteInt(num int)            { r.out = redcon.AppendInt(r.out, int64(num)) }
func (r *replies) WriteInt64(num int64)        { r.out = redcon.AppendInt(r.out, num) }
func (r *replies) WriteUint64(num uint64)      { r.out = redcon.AppendUint(r.out, num) }
func (r *replies) WriteArray(count int)        { r.out = redcon.AppendArray(r.out, count) }
func (r *replies) WriteNull()                  { r.out = redcon.AppendNull(r.out) }
func (r *replies) WriteRaw(data []byte)        { r.out = append(r.out, data...) }
func (r *replies) WriteAny(v any)              { r.out = redcon.AppendAny(r.out, v) }
