package quorum

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run on each backend. Keeping them in .lua files lets them be
// read and tested as Lua; go-redis sends EVALSHA and falls back to EVAL on
// NOSCRIPT, which a restarted backend answers.
var (
	//go:embed lua/acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed lua/release_stamped.lua
	releaseStampedLua    string
	releaseStampedScript = redis.NewScript(releaseStampedLua)

	//go:embed lua/release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed lua/extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)

	//go:embed lua/read.lua
	readLua    string
	readScript = redis.NewScript(readLua)

	//go:embed lua/acquire_all.lua
	acquireAllLua    string
	acquireAllScript = redis.NewScript(acquireAllLua)

	//go:embed lua/release_all.lua
	releaseAllLua    string
	releaseAllScript = redis.NewScript(releaseAllLua)

	//go:embed lua/extend_all.lua
	extendAllLua    string
	extendAllScript = redis.NewScript(extendAllLua)

	//go:embed lua/extend_by.lua
	extendByLua    string
	extendByScript = redis.NewScript(extendByLua)

	//go:embed lua/extend_or_acquire.lua
	extendOrAcquireLua    string
	extendOrAcquireScript = redis.NewScript(extendOrAcquireLua)

	//go:embed lua/acquire_or_renew.lua
	acquireOrRenewLua    string
	acquireOrRenewScript = redis.NewScript(acquireOrRenewLua)
)
