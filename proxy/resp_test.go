package proxy

import (
	"testing"

	"github.com/tidwall/redcon"
)

func TestRESPWriters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(redcon.Conn)
		resp2 string
		resp3 string
	}{
		{"null", writeNull, "$-1\r\n", "_\r\n"},
		{"empty map", func(c redcon.Conn) { writeMapLen(c, 0) }, "*0\r\n", "%0\r\n"},
		{"map of 7", func(c redcon.Conn) { writeMapLen(c, 7) }, "*14\r\n", "%7\r\n"},
		{"true", func(c redcon.Conn) { writeBool(c, true) }, ":1\r\n", ":1\r\n"},
		{"false", func(c redcon.Conn) { writeBool(c, false) }, ":0\r\n", ":0\r\n"},
		{"script integer", func(c redcon.Conn) { writeValue(c, int64(-1)) }, ":-1\r\n", ":-1\r\n"},
		{"script string", func(c redcon.Conn) { writeValue(c, "v") }, "$1\r\nv\r\n", "$1\r\nv\r\n"},
		{"script status", func(c redcon.Conn) { writeValue(c, statusOK{}) }, "+OK\r\n", "+OK\r\n"},
		{"script nil", func(c redcon.Conn) { writeValue(c, nil) }, "$-1\r\n", "_\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for proto, want := range map[int]string{2: tc.resp2, 3: tc.resp3} {
				c := newRecConn(proto)
				tc.write(c)
				if !c.bytesEqual(want) {
					t.Errorf("RESP%d: want %q, got %q", proto, want, c)
				}
			}
		})
	}
}
