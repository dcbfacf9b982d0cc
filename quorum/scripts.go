package quorum

import (
	"embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// The scripts run on each backend. Keeping them in .lua files lets them be
// read and tested as Lua. They are loaded on every new backend connection
// and run by SHA1; a backend that answers NOSCRIPT (SCRIPT FLUSH) gets EVAL.
//
// The scripts that take or extend locks start with lua/setcheck.lua, and
// their commands end with the engine's set (checkedCommand), so that a
// proxy whose backend set the backends no longer record is refused; and
// with lua/horizon.lua, whose horizon(key) each calls after it sets a
// lock's expiry (TestEveryLeaseScriptRecords holds them to it).
var (
	acquireScript         = checkedScript("acquire")
	releaseStampedScript  = luaScript("release_stamped")
	acquireAllScript      = checkedScript("acquire_all")
	extendOrAcquireScript = checkedScript("extend_or_acquire")
	acquireOrRenewScript  = checkedScript("acquire_or_renew")
	identityScript        = luaScript("identity")
	fenceSeedScript       = luaScript("fence_seed")
	deleteScript          = luaScript("delete")
	claimScript           = luaScript("claim")
	adoptScript           = luaScript("adopt")
	expireScript          = checkedScript("expire")
	settleScript          = luaScript("settle")
	markScript            = luaScript("mark")

	// The scripts of hash locks (Redisson's RLock, hashlock.go).
	hashAcquireScript   = checkedScript("hash_acquire")
	hashReleaseScript   = checkedScript("hash_release")
	hashRenewEachScript = checkedScript("hash_renew_each")
	hashUndoScript      = luaScript("hash_undo")
	hashFillScript      = checkedScript("hash_fill")
	hashDropScript      = luaScript("hash_drop")
	hashFieldScript     = luaScript("hash_field")

	// The scripts of read-write locks (Redisson's RReadWriteLock,
	// rwlock.go), each after lua/rw.lua.
	rwAcquireScript   = rwScript("rw_acquire", true)
	rwReleaseScript   = rwScript("rw_release", true)
	rwFillScript      = rwScript("rw_fill", true)
	rwRenewEachScript = rwScript("rw_renew_each", true)
	rwUndoScript      = rwScript("rw_undo", false)
	rwDropScript      = rwScript("rw_drop", false)
	rwReadScript      = rwScript("rw_read", false)
	rwDeleteScript    = rwScript("rw_delete", false)

	// The scripts of fenced hash locks: the token in the hash's field
	// "\0fence" (lua/hash_acquire_fenced.lua).
	hashAcquireFencedScript = fencedScript("hash_acquire_fenced", "mint")
	hashFenceRaiseScript    = luaScript("hash_fence_raise")
	hashFenceReadScript     = luaScript("hash_fence_read")

	// The scripts of fencing alone, which read or write the token in a
	// lock's value (lua/value_fenced.lua).
	acquireFencedScript         = fencedScript("acquire_fenced", "mint")
	releaseFencedScript         = luaScript("release_fenced")
	acquireAllFencedScript      = fencedScript("acquire_all_fenced", "mint")
	extendOrAcquireFencedScript = fencedScript("extend_or_acquire_fenced", "mint")
	acquireOrRenewFencedScript  = fencedScript("acquire_or_renew_fenced", "mint")
	fenceRaiseScript            = newScript(fencedValues.expand(luaSource("fence_raise")))
	fenceReadScript             = newScript(fencedValues.expand(luaSource("fence_read")))
	fenceFillScript             = fencedScript("fence_fill")

	plainValues  = newValueScripts(false)
	fencedValues = newValueScripts(true)

	allScripts = []*backend.Script{
		acquireScript, releaseStampedScript, acquireAllScript, extendOrAcquireScript,
		acquireOrRenewScript, identityScript, fenceSeedScript, deleteScript, claimScript, expireScript, settleScript, markScript,
		acquireFencedScript, releaseFencedScript, acquireAllFencedScript,
		extendOrAcquireFencedScript, acquireOrRenewFencedScript, fenceRaiseScript, fenceReadScript, fenceFillScript,
		plainValues.release, plainValues.releaseAll, plainValues.extend, plainValues.extendAll,
		plainValues.extendBy, plainValues.read, plainValues.renewEach,
		fencedValues.release, fencedValues.releaseAll, fencedValues.extend, fencedValues.extendAll,
		fencedValues.extendBy, fencedValues.read, fencedValues.renewEach,
		hashAcquireScript, hashReleaseScript, hashRenewEachScript, hashUndoScript, hashDropScript, hashFieldScript,
		hashAcquireFencedScript, hashFenceRaiseScript, hashFenceReadScript,
		rwAcquireScript, rwReleaseScript, rwFillScript, rwRenewEachScript, rwUndoScript, rwDropScript, rwReadScript, rwDeleteScript,
	}
)

// valueScripts are the scripts that read a lock's value. With fencing the
// value on a backend is the holder's token, a NUL byte and the lock's
// fencing token in 19 digits, zero-padded (fence.go), so that the token
// goes and expires with the lock, one key as without fencing; the fixed
// width tells the parts apart by their lengths, whatever bytes the
// holder's token holds. A value without them is a lock taken before
// fencing was turned on. Each script is one source in which holds(v, t),
// plain(v) and fenceOf(v, t) are written out for the mode (expand):
// inline rather than Lua functions, which a script would create anew on
// every call, and an engine runs the ones of its Config.Fencing.
type valueScripts struct {
	fenced                                                            bool
	release, releaseAll, extend, extendAll, extendBy, read, renewEach *backend.Script
	// inspect is not among the scripts loaded on every connection: a
	// listing is rare, and the first one on a connection sends its source
	// once.
	inspect *backend.Script
}

func newValueScripts(fenced bool) *valueScripts {
	v := &valueScripts{fenced: fenced}
	script := func(name string) *backend.Script { return newScript(v.expand(luaSource(name))) }
	checked := func(name string) *backend.Script {
		return newScript(leaseSource + v.expand(luaSource(name)))
	}
	v.release, v.releaseAll, v.read, v.inspect = script("release"), script("release_all"), script("read"), script("inspect")
	v.extend, v.extendAll, v.extendBy = checked("extend"), checked("extend_all"), checked("extend_by")
	v.renewEach = checked("renew_each")
	return v
}

// valueCall is a call of holds, plain or fenceOf in a script's source;
// its arguments are names or KEYS/ARGV items, each read twice or more
// once written out.
var valueCall = regexp.MustCompile(`\b(holds|plain|fenceOf)\(([A-Za-z_]\w*(?:\[\w+\])?)(?:, ([A-Za-z_]\w*(?:\[\w+\])?))?\)`)

// valueCallStart finds a call that valueCall did not match, whose
// arguments are not names.
var valueCallStart = regexp.MustCompile(`\b(holds|plain|fenceOf)\(`)

// expand writes out src's calls of holds(value, token) (token holds the
// lock whose value is value), plain(value) (the holder's token in value)
// and fenceOf(value, token) (the fencing token that value carries for
// token, as text; "" for a lock taken before fencing).
func (v *valueScripts) expand(src string) string {
	out := valueCall.ReplaceAllStringFunc(src, func(call string) string {
		m := valueCall.FindStringSubmatch(call)
		fn, value, token := m[1], m[2], m[3]
		switch {
		case fn == "holds" && !v.fenced:
			return "(" + value + " == " + token + ")"
		case fn == "holds":
			return fmt.Sprintf("(%[1]s == %[2]s or (%[1]s and #%[1]s == #%[2]s + 20 and string.sub(%[1]s, 1, #%[2]s) == %[2]s))", value, token)
		case fn == "plain" && !v.fenced:
			return value
		case fn == "plain":
			return fmt.Sprintf("(%[1]s and #%[1]s > 20 and string.byte(%[1]s, -20) == 0 and string.sub(%[1]s, 1, -21) or %[1]s)", value)
		default: // fenceOf
			return fmt.Sprintf("(%[1]s == %[2]s and \"\" or string.sub(%[1]s, -19))", value, token)
		}
	})
	if loc := valueCallStart.FindStringIndex(out); loc != nil {
		panic("quorum: a lock value call not written out in a script: " + out[loc[0]:min(len(out), loc[0]+60)])
	}
	return out
}

// valuesOf is the value scripts of an engine with fencing on or off.
func valuesOf(fencing bool) *valueScripts {
	if fencing {
		return fencedValues
	}
	return plainValues
}

//go:embed lua/*.lua
var luaFiles embed.FS

// luaScript is lua/name.lua.
func luaScript(name string) *backend.Script { return newScript(luaSource(name)) }

// noticeSource defines notify(key, payload[, wanted]), the release notice
// that only marked keys publish.
var noticeSource = luaSource("notice")

// newScript is the script of src, after lua/notice.lua where src calls
// notify, its horizon calls written out, and with the cuts of a build made
// for measuring (cost.go).
func newScript(src string) *backend.Script {
	if strings.Contains(src, "notify(") {
		src = noticeSource + src
	}
	return backend.NewScript(cutCosts(writeHorizonCalls(src), measureOff))
}

// horizonCall is a call of horizon(key) in a lease script, and
// horizonCallCode what it is written out as (lua/horizon_call.lua, its
// KEY the call's argument).
var (
	horizonCall     = regexp.MustCompile(`(return )?\bhorizon\(([^()]+)\)`)
	horizonCallCode = codeOf(luaSource("horizon_call"))
)

// writeHorizonCalls writes out the horizon calls on src's lines of code.
func writeHorizonCalls(src string) string {
	lines := strings.SplitAfter(src, "\n")
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		lines[i] = horizonCall.ReplaceAllStringFunc(line, func(call string) string {
			m := horizonCall.FindStringSubmatch(call)
			code := strings.ReplaceAll(horizonCallCode, "KEY", m[2])
			if m[1] != "" {
				code += " return leaseEnd"
			}
			return code
		})
	}
	return strings.Join(lines, "")
}

// codeOf is src without its comment lines, on one line.
func codeOf(src string) string {
	var code []string
	for line := range strings.SplitSeq(src, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
			code = append(code, line)
		}
	}
	return strings.Join(code, " ")
}

// leaseSource starts every script that takes or extends locks: the set
// check, and horizon(key).
var leaseSource = luaSource("setcheck") + luaSource("horizon")

// checkedScript is lua/name.lua after leaseSource.
func checkedScript(name string) *backend.Script {
	return newScript(leaseSource + luaSource(name))
}

// rwScript is lua/name.lua after lua/rw.lua, and after leaseSource when
// checked.
func rwScript(name string, checked bool) *backend.Script {
	src := luaSource("rw") + luaSource(name)
	if checked {
		src = leaseSource + src
	}
	return newScript(src)
}

// fencedScript is lua/name.lua after leaseSource and the named helpers
// (lua/mint.lua), its lock value calls written out with fencing, for the
// scripts of fencing alone.
func fencedScript(name string, helpers ...string) *backend.Script {
	src := leaseSource
	for _, h := range helpers {
		src += luaSource(h)
	}
	return newScript(src + fencedValues.expand(luaSource(name)))
}

// luaSource reads lua/name.lua; a missing file is a build mistake, caught
// when the package loads.
func luaSource(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return string(src)
}
