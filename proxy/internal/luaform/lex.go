package luaform

import (
	"fmt"
	"strconv"
	"strings"
)

// The lexer follows Lua 5.1.5's llex.c, which is what Redis embeds (with
// LUA_COMPAT_LSTR 1), case by case: where this file and llex.c could read
// a text differently, this file refuses it instead.

type tokenKind uint8

const (
	tokEOF tokenKind = iota
	tokName
	tokKeyword
	tokString
	tokNumber
	tokSymbol // an operator or punctuation, in text
)

type token struct {
	kind tokenKind
	text string  // the name, keyword or symbol
	str  string  // a string's value, escapes decoded
	num  float64 // a number's value
	// line is where the token starts and endLine where it ends (a long
	// string spans lines): Lua refuses a call whose "(" starts a line.
	line, endLine int
}

// keywords are Lua 5.1's reserved words; goto is a name in 5.1.
var keywords = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true,
	"false": true, "for": true, "function": true, "if": true, "in": true,
	"local": true, "nil": true, "not": true, "or": true, "repeat": true, "return": true,
	"then": true, "true": true, "until": true, "while": true,
}

// symbols are the one-byte tokens, and "=" "<" ">" "~" followed by the
// "=" of their two-byte forms.
var symbols = func() (t [256]string) {
	for _, s := range []string{"+", "*", "/", "%", "^", "#", "(", ")", "{", "}", "]", ";", ":", ","} {
		t[s[0]] = s
	}
	for _, s := range []string{"==", "<=", ">=", "~="} {
		t[s[0]] = s
	}
	return t
}()

type lexer struct {
	src  []byte
	pos  int
	line int
}

func (l *lexer) current() int {
	if l.pos >= len(l.src) {
		return -1 // EOZ
	}
	return int(l.src[l.pos])
}

func isNewline(c int) bool { return c == '\n' || c == '\r' }

// isSpace, isDigit, isAlpha and isAlnum are C's, in the C locale that Redis
// runs Lua in: bytes above 127 are none of them.
func isSpace(c int) bool { return c == ' ' || c >= '\t' && c <= '\r' }
func isDigit(c int) bool { return c >= '0' && c <= '9' }
func isAlpha(c int) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isAlnum(c int) bool { return isAlpha(c) || isDigit(c) }

// newline skips "\n", "\r", "\n\r" or "\r\n" as one line end (inclinenumber).
func (l *lexer) newline() {
	old := l.current()
	l.pos++
	if c := l.current(); isNewline(c) && c != old {
		l.pos++
	}
	l.line++
}

type lexError struct{ msg string }

func (e *lexError) Error() string { return e.msg }

func (l *lexer) fail(format string, args ...any) {
	panic(&lexError{fmt.Sprintf("line %d: ", l.line) + fmt.Sprintf(format, args...)})
}

// next returns the next token (llex).
func (l *lexer) next() token {
	for {
		start := l.line
		tok := func(kind tokenKind, text string) token {
			return token{kind: kind, text: text, line: start, endLine: l.line}
		}
		c := l.current()
		switch {
		case c == -1:
			return tok(tokEOF, "")
		case isNewline(c):
			l.newline()
		case c == '-':
			l.pos++
			if l.current() != '-' {
				return tok(tokSymbol, "-")
			}
			l.pos++
			if l.current() == '[' {
				if sep := l.skipSep(); sep >= 0 {
					l.longString(sep, false)
					continue
				}
			}
			// A short comment ends at "\n" or "\r", whichever comes first.
			for c := l.current(); !isNewline(c) && c != -1; c = l.current() {
				l.pos++
			}
		case c == '[':
			sep := l.skipSep()
			switch {
			case sep >= 0:
				s := l.longString(sep, true)
				t := tok(tokString, "")
				t.str = s
				return t
			case sep == -1:
				return tok(tokSymbol, "[")
			}
			l.fail("invalid long string delimiter")
		case c == '=' || c == '<' || c == '>' || c == '~':
			l.pos++
			if l.current() == '=' {
				l.pos++
				return tok(tokSymbol, symbols[c][:2])
			}
			return tok(tokSymbol, symbols[c][:1])
		case c == '"' || c == '\'':
			s := l.shortString(byte(c))
			t := tok(tokString, "")
			t.str = s
			return t
		case c == '.':
			rest := l.src[l.pos:]
			if len(rest) >= 3 && rest[1] == '.' && rest[2] == '.' {
				l.pos += 3
				return tok(tokSymbol, "...")
			}
			if len(rest) >= 2 && rest[1] == '.' {
				l.pos += 2
				return tok(tokSymbol, "..")
			}
			if l.pos+1 < len(l.src) && isDigit(int(l.src[l.pos+1])) {
				t := tok(tokNumber, "")
				t.num = l.numeral()
				return t
			}
			l.pos++
			return tok(tokSymbol, ".")
		case isSpace(c):
			l.pos++
		case isDigit(c):
			t := tok(tokNumber, "")
			t.num = l.numeral()
			return t
		case isAlpha(c) || c == '_':
			begin := l.pos
			for c := l.current(); isAlnum(c) || c == '_'; c = l.current() {
				l.pos++
			}
			word := string(l.src[begin:l.pos])
			if keywords[word] {
				return tok(tokKeyword, word)
			}
			return tok(tokName, word)
		default:
			l.pos++
			if sym := symbols[c]; sym != "" {
				return tok(tokSymbol, sym[:1])
			}
			// Lua returns any other byte as a token that no rule of the
			// grammar takes: a syntax error there too.
			l.fail("unexpected byte 0x%02x", c)
		}
	}
}

// skipSep reads "[" or "]" and the "="s after it: their count when the
// same bracket follows (left unread), else -count-1 (skip_sep).
func (l *lexer) skipSep() int {
	s := l.current()
	l.pos++
	count := 0
	for l.current() == '=' {
		l.pos++
		count++
	}
	if l.current() == s {
		return count
	}
	return -count - 1
}

// longString reads a long string or comment from its second "[" and
// returns its value (read_long_string).
func (l *lexer) longString(sep int, keep bool) string {
	l.pos++ // the second "["
	if isNewline(l.current()) {
		l.newline() // a first line end is not part of the string
	}
	var b strings.Builder
	for {
		c := l.current()
		switch {
		case c == -1:
			l.fail("unfinished long string or comment")
		case c == '[':
			from := l.pos
			if l.skipSep() == sep {
				if sep == 0 {
					l.fail("nesting of [[...]] is deprecated")
				}
				l.pos++ // LUA_COMPAT_LSTR 1: counted, but not matched
			}
			b.Write(l.src[from:l.pos])
		case c == ']':
			from := l.pos
			if l.skipSep() == sep {
				l.pos++
				if keep {
					return b.String()
				}
				return ""
			}
			b.Write(l.src[from:l.pos])
		case isNewline(c):
			b.WriteByte('\n') // whatever the line end was
			l.newline()
		default:
			b.WriteByte(byte(c))
			l.pos++
		}
	}
}

// shortString reads a quoted string and returns its value (read_string).
func (l *lexer) shortString(quote byte) string {
	l.pos++
	var b strings.Builder
	for {
		c := l.current()
		switch {
		case c == int(quote):
			l.pos++
			return b.String()
		case c == -1, isNewline(c):
			l.fail("unfinished string")
		case c == '\\':
			l.pos++
			c = l.current()
			switch {
			case c == 'a':
				b.WriteByte('\a')
			case c == 'b':
				b.WriteByte('\b')
			case c == 'f':
				b.WriteByte('\f')
			case c == 'n':
				b.WriteByte('\n')
			case c == 'r':
				b.WriteByte('\r')
			case c == 't':
				b.WriteByte('\t')
			case c == 'v':
				b.WriteByte('\v')
			case isNewline(c):
				b.WriteByte('\n')
				l.newline()
				continue
			case c == -1:
				continue // unfinished: the loop fails
			case isDigit(c):
				n := 0
				for i := 0; i < 3 && isDigit(l.current()); i++ {
					n = n*10 + l.current() - '0'
					l.pos++
				}
				if n > 255 {
					l.fail("escape sequence too large")
				}
				b.WriteByte(byte(n))
				continue
			default:
				// Lua 5.1 keeps any other escaped byte as itself: \\,
				// \", \' and \? but also \q or \x.
				b.WriteByte(byte(c))
			}
			l.pos++
		default:
			b.WriteByte(byte(c))
			l.pos++
		}
	}
}

// numeral reads a number (read_numeral) and converts it as luaO_str2d
// does. Only forms whose value Go's conversion gives exactly as glibc's
// strtod does are taken: decimal integers and decimals, and hexadecimal
// integers that a double holds exactly.
func (l *lexer) numeral() float64 {
	begin := l.pos
	for c := l.current(); isDigit(c) || c == '.'; c = l.current() {
		l.pos++
	}
	if c := l.current(); c == 'e' || c == 'E' {
		l.pos++
		if c := l.current(); c == '+' || c == '-' {
			l.pos++
		}
	}
	for c := l.current(); isAlnum(c) || c == '_'; c = l.current() {
		l.pos++
	}
	text := string(l.src[begin:l.pos])
	if len(text) > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X') {
		n, err := strconv.ParseUint(text[2:], 16, 64)
		if err != nil || n > 1<<53 || strings.ContainsAny(text[2:], "+-_") {
			l.fail("malformed or inexact number %q", text)
		}
		return float64(n)
	}
	if !decimalNumeral(text) {
		l.fail("malformed number %q", text)
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		l.fail("malformed number %q", text)
	}
	return f
}

// decimalNumeral reports whether s is digits, an optional fraction and an
// optional exponent, with at least one digit before the exponent.
func decimalNumeral(s string) bool {
	i, digits := 0, 0
	for i < len(s) && isDigit(int(s[i])) {
		i, digits = i+1, digits+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && isDigit(int(s[i])) {
			i, digits = i+1, digits+1
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := i
		for i < len(s) && isDigit(int(s[i])) {
			i++
		}
		if i == exp {
			return false
		}
	}
	return i == len(s)
}
