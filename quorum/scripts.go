package quorum

import (
	"embed"

	"github.com/lockproxy/lockproxy/quorum/internal/backend"
)

// The scripts run on each backend. Keeping them in .lua files lets them be
// read and tested as Lua. They are loaded on every new backend connection
// and run by SHA1; a backend that answers NOSCRIPT (SCRIPT FLUSH) gets EVAL.
var (
	acquireScript         = luaScript("acquire")
	releaseScript         = luaScript("release")
	releaseStampedScript  = luaScript("release_stamped")
	extendScript          = luaScript("extend")
	readScript            = luaScript("read")
	acquireAllScript      = luaScript("acquire_all")
	releaseAllScript      = luaScript("release_all")
	extendAllScript       = luaScript("extend_all")
	extendByScript        = luaScript("extend_by")
	extendOrAcquireScript = luaScript("extend_or_acquire")
	acquireOrRenewScript  = luaScript("acquire_or_renew")
	identityScript        = luaScript("identity")

	allScripts = []*backend.Script{
		acquireScript, releaseScript, releaseStampedScript, extendScript, readScript,
		acquireAllScript, releaseAllScript, extendAllScript, extendByScript,
		extendOrAcquireScript, acquireOrRenewScript, identityScript,
	}
)

//go:embed lua/*.lua
var luaFiles embed.FS

// luaScript loads lua/name.lua; a missing file is a build mistake, caught
// when the package loads.
func luaScript(name string) *backend.Script {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return backend.NewScript(string(src))
}
