package quorum

import (
	"embed"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// The scripts run on each backend. Keeping them in .lua files lets them be
// read and tested as Lua. They are loaded on every new backend connection
// and run by SHA1; a backend that answers NOSCRIPT (SCRIPT FLUSH) gets EVAL.
//
// The scripts that take or extend locks start with lua/setcheck.lua, and
// their commands end with the engine's set (checkedCommand), so that a
// proxy whose backend set the backends no longer record is refused.
var (
	acquireScript         = checkedScript("acquire")
	acquireFencedScript   = checkedScript("acquire_fenced")
	releaseScript         = luaScript("release")
	releaseStampedScript  = luaScript("release_stamped")
	releaseFencedScript   = luaScript("release_fenced")
	extendScript          = checkedScript("extend")
	readScript            = luaScript("read")
	acquireAllScript      = checkedScript("acquire_all")
	releaseAllScript      = luaScript("release_all")
	extendAllScript       = checkedScript("extend_all")
	extendByScript        = checkedScript("extend_by")
	extendOrAcquireScript = checkedScript("extend_or_acquire")
	acquireOrRenewScript  = checkedScript("acquire_or_renew")
	identityScript        = luaScript("identity")
	fenceRaiseScript      = luaScript("fence_raise")
	fenceReadScript       = luaScript("fence_read")
	fenceSeedScript       = luaScript("fence_seed")
	deleteScript          = luaScript("delete")
	settleScript          = luaScript("settle")

	acquireAllFencedScript      = fencedScript("acquire_all_fenced")
	extendAllFencedScript       = checkedScript("extend_all_fenced")
	extendOrAcquireFencedScript = fencedScript("extend_or_acquire_fenced")
	acquireOrRenewFencedScript  = fencedScript("acquire_or_renew_fenced")
	expireFencedScript          = luaScript("expire_fenced")

	allScripts = []*backend.Script{
		acquireScript, releaseScript, releaseStampedScript, extendScript, readScript,
		acquireAllScript, releaseAllScript, extendAllScript, extendByScript,
		extendOrAcquireScript, acquireOrRenewScript, identityScript,
		fenceRaiseScript, fenceReadScript, acquireFencedScript,
		fenceSeedScript, acquireAllFencedScript, extendAllFencedScript,
		extendOrAcquireFencedScript, acquireOrRenewFencedScript, expireFencedScript,
		releaseFencedScript, deleteScript, settleScript,
	}
)

//go:embed lua/*.lua
var luaFiles embed.FS

// luaScript is lua/name.lua.
func luaScript(name string) *backend.Script { return backend.NewScript(luaSource(name)) }

// checkedScript is lua/name.lua after lua/setcheck.lua.
func checkedScript(name string) *backend.Script {
	return backend.NewScript(luaSource("setcheck") + luaSource(name))
}

// fencedScript is lua/name.lua after lua/setcheck.lua and lua/mint.lua,
// for the scripts that mint a fencing token.
func fencedScript(name string) *backend.Script {
	return backend.NewScript(luaSource("setcheck") + luaSource("mint") + luaSource(name))
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
