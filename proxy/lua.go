package proxy

import (
	"slices"
	"strings"
)

// Libraries send the same lock scripts with different whitespace, quotes,
// case, comments and local variables, so scripts are recognised by a
// normal form rather than by SHA1 alone. normalise keeps meaning: two
// scripts with the same normal form do the same thing on Redis (or one of
// them fails there), provided the form matches one of our templates.

// maxRecognisedScript bounds the work spent on one script; lock scripts
// are a few hundred bytes, and a longer one is simply not recognised.
const maxRecognisedScript = 16 << 10

// normalise returns the normal form of a Lua script: its tokens without
// whitespace or comments, every short string in double quotes, joined by
// one space (so "return 0" never reads as the name "return0"); names,
// command names and SET-style options lower-cased (other strings keep their
// case: "yes" and "YES" are different values); ';' separators, tonumber(...)
// wrappers and parentheses around a whole if condition dropped; and locals
// bound to KEYS[n], ARGV[n] or redis.call("get", KEYS[n]) replaced by that
// value.
func normalise(src string) string {
	toks := luaTokens(src)
	for i, t := range toks {
		if !isString(t) {
			toks[i] = strings.ToLower(t)
		}
	}
	for i, t := range toks {
		if isString(t) && (isCommandName(toks, i) || optionWords[strings.ToLower(t)]) {
			toks[i] = strings.ToLower(t)
		}
	}
	toks = dropConditionParens(dropTokens(toks, ";"))
	for {
		next, ok := inlineLocal(toks)
		if !ok {
			break
		}
		toks = next
	}
	// After inlining, so that a local holding tonumber(ARGV[n]) is judged
	// where it is used.
	return strings.Join(dropTonumber(toks), " ")
}

// luaOperators are Lua's multi-byte operators, longest first.
var luaOperators = []string{"...", "==", "~=", "<=", ">=", "..", "//", "::", "<<", ">>"}

// luaTokens splits Lua source into tokens, dropping whitespace and comments
// and rewriting every short string in double quotes (escapes kept as
// written). Malformed input still yields tokens: it only has to not match.
func luaTokens(src string) []string {
	var toks []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(src[i:], "--"):
			i = skipComment(src, i+2)
		case c == '"' || c == '\'':
			end := endOfString(src, i)
			body := src[i+1 : max(end-1, i+1)]
			if c == '\'' {
				body = strings.ReplaceAll(body, `"`, `\"`) // keep token bounds unambiguous
			}
			toks = append(toks, `"`+body+`"`)
			i = end
		case c == '[' && longBracket(src[i:]) >= 0:
			end := endOfLong(src, i)
			toks = append(toks, src[i:end])
			i = end
		case isWordByte(c):
			j := i + 1
			for j < len(src) && isWordByte(src[j]) {
				j++
			}
			toks = append(toks, src[i:j])
			i = j
		default:
			op := src[i : i+1]
			for _, o := range luaOperators {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			toks = append(toks, op)
			i += len(op)
		}
	}
	return toks
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// skipComment returns the index after the comment whose text starts at i.
func skipComment(src string, i int) int {
	if longBracket(src[i:]) >= 0 {
		return endOfLong(src, i)
	}
	if nl := strings.IndexByte(src[i:], '\n'); nl >= 0 {
		return i + nl + 1
	}
	return len(src)
}

// endOfString returns the index after the short string opening at i.
func endOfString(src string, i int) int {
	quote := src[i]
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case quote:
			return j + 1
		}
	}
	return len(src)
}

// longBracket returns the level n of a "[" "="*n "[" opening, or -1.
func longBracket(s string) int {
	n := 1
	for n < len(s) && s[n] == '=' {
		n++
	}
	if n < len(s) && s[0] == '[' && s[n] == '[' {
		return n - 1
	}
	return -1
}

// endOfLong returns the index after the long bracket opening at i.
func endOfLong(src string, i int) int {
	level := longBracket(src[i:])
	closing := "]" + strings.Repeat("=", level) + "]"
	start := i + level + 2
	if end := strings.Index(src[start:], closing); end >= 0 {
		return start + end + len(closing)
	}
	return len(src)
}

// isString reports whether the token is a string literal.
func isString(t string) bool {
	return strings.HasPrefix(t, `"`) || len(t) > 1 && t[0] == '['
}

// isCommandName reports whether toks[i] is the first argument of
// redis.call or redis.pcall: Redis reads command names in any case.
func isCommandName(toks []string, i int) bool {
	return i >= 4 && toks[i-1] == "(" && (toks[i-2] == "call" || toks[i-2] == "pcall") &&
		toks[i-3] == "." && toks[i-4] == "redis"
}

// optionWords are the command options lock scripts pass (SET's NX, PX...),
// which Redis reads in any case. Another string keeps its case, so that a
// script comparing ARGV[3] with "YES" never reads as one comparing it with
// "yes"; the templates hold these words only where they are options.
var optionWords = map[string]bool{
	`"nx"`: true, `"xx"`: true, `"px"`: true, `"ex"`: true, `"pxat"`: true, `"exat"`: true,
	`"keepttl"`: true, `"get"`: true, `"gt"`: true, `"lt"`: true, `"withscores"`: true,
}

// dropConditionParens removes parentheses around a whole if or elseif
// condition: "if (a == b) then" means "if a == b then".
func dropConditionParens(toks []string) []string {
	for i := 0; i+1 < len(toks); i++ {
		if (toks[i] != "if" && toks[i] != "elseif") || toks[i+1] != "(" {
			continue
		}
		end := closingParen(toks, i+1)
		if end < 0 || end+1 >= len(toks) || toks[end+1] != "then" {
			continue
		}
		toks = append(toks[:end], toks[end+1:]...)
		toks = append(toks[:i+1], toks[i+2:]...)
		i-- // "if ((a)) then" loses both pairs
	}
	return toks
}

func dropTokens(toks []string, drop string) []string {
	out := toks[:0]
	for _, t := range toks {
		if t != drop {
			out = append(out, t)
		}
	}
	return out
}

// dropTonumber removes the tonumber( ... ) wrappers of command arguments
// (after a comma), keeping their argument: Redis converts string arguments
// of commands itself. Elsewhere, in a comparison say, a number is not the
// string it came from, so the wrapper stays.
func dropTonumber(toks []string) []string {
	for i := 1; i+1 < len(toks); i++ {
		if toks[i] != "tonumber" || toks[i+1] != "(" || toks[i-1] != "," {
			continue
		}
		if end := closingParen(toks, i+1); end > 0 {
			toks = append(toks[:end], toks[end+1:]...)
			toks = append(toks[:i], toks[i+2:]...)
			i--
		}
	}
	return toks
}

// closingParen returns the index of the ")" matching the "(" at open, or -1.
func closingParen(toks []string, open int) int {
	depth := 0
	for j := open; j < len(toks); j++ {
		switch toks[j] {
		case "(":
			depth++
		case ")":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// inlineLocal finds the first "local name = value" whose value is pure
// (see pureValue) and complete, deletes it, and writes the value in place
// of every later use of name.
func inlineLocal(toks []string) ([]string, bool) {
	for i := 0; i+3 < len(toks); i++ {
		if toks[i] != "local" || !isName(toks[i+1]) || toks[i+2] != "=" {
			continue
		}
		n := pureValue(toks[i+3:])
		rest := i + 3 + n
		readsKey := toks[i+3] == "redis" // a GET, unlike KEYS/ARGV, depends on when it runs
		if n == 0 || continuesExpr(toks, rest) || (readsKey && usedAfterCall(toks[rest:], toks[i+1])) {
			continue
		}
		out := append([]string(nil), toks[:i]...)
		for j := rest; j < len(toks); j++ {
			if isUse(toks, j, toks[i+1]) {
				out = append(out, toks[i+3:rest]...)
				continue
			}
			out = append(out, toks[j])
		}
		return out, true
	}
	return toks, false
}

// usedAfterCall reports whether name is used after the next redis call:
// a GET read before a write must not be moved past it.
func usedAfterCall(toks []string, name string) bool {
	call := slices.Index(toks, "redis")
	if call < 0 {
		return false
	}
	for j := call; j < len(toks); j++ {
		if isUse(toks, j, name) {
			return true
		}
	}
	return false
}

// isUse reports whether toks[j] is the variable name, not a field name.
func isUse(toks []string, j int, name string) bool {
	return toks[j] == name && (j == 0 || (toks[j-1] != "." && toks[j-1] != ":"))
}

// pureValue returns the token length of a side-effect-free value opening
// t: keys[n], argv[n] or redis.call("get",keys[n]); else 0.
func pureValue(t []string) int {
	index := func(t []string) bool {
		return len(t) >= 4 && (t[0] == "keys" || t[0] == "argv") && t[1] == "[" && isNumber(t[2]) && t[3] == "]"
	}
	switch {
	case index(t):
		return 4
	case len(t) >= 7 && t[0] == "tonumber" && t[1] == "(" && index(t[2:]) && t[6] == ")":
		return 7
	case len(t) >= 11 && t[0] == "redis" && t[1] == "." && t[2] == "call" && t[3] == "(" &&
		t[4] == `"get"` && t[5] == "," && index(t[6:]) && t[10] == ")":
		return 11
	}
	return 0
}

// continuesExpr reports whether the token at i extends the expression
// before it, which then is not the plain value it looked like.
func continuesExpr(toks []string, i int) bool {
	if i >= len(toks) {
		return false
	}
	switch t := toks[i]; t {
	case "and", "or", "(", "[", ".", ":", "{", "+", "-", "*", "/", "//", "%", "^",
		"..", "==", "~=", "<", ">", "<=", ">=", "&", "|", "~", "<<", ">>":
		return true
	default:
		return strings.HasPrefix(t, `"`) || strings.HasPrefix(t, "[")
	}
}

func isName(t string) bool {
	if t == "" || t[0] >= '0' && t[0] <= '9' || luaKeywords[t] {
		return false
	}
	for i := 0; i < len(t); i++ {
		if !isWordByte(t[i]) {
			return false
		}
	}
	return true
}

func isNumber(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return false
		}
	}
	return true
}

var luaKeywords = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true,
	"false": true, "for": true, "function": true, "goto": true, "if": true, "in": true,
	"local": true, "nil": true, "not": true, "or": true, "repeat": true, "return": true,
	"then": true, "true": true, "until": true, "while": true,
}
