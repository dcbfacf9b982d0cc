package proxy

import (
	"strings"
)

// The unlock channels of lock libraries. A library that waits for a held
// lock by pub/sub subscribes to a channel (or a pattern of channels) named
// after the lock, and its release script PUBLISHes there. Through the
// proxy the script's PUBLISH is never run on the backends (N copies, from
// every backend): the release is a quorum release like any other, every
// proxy hears of it (quorum.Engine.Releases), and each proxy tells its own
// subscribers, in the library's words: on the channels the library would
// have published on, with the payload it would have sent.
//
// One row per library.

// lockChannel is one library's unlock channel.
type lockChannel struct {
	library string
	// keyOf is the glob of the lock keys whose releases are told on
	// channel (SUBSCRIBE): a superset is fine, each release is checked
	// against channels; false when channel is not one of the library's.
	keyOf func(channel string) (string, bool)
	// keysOf is the glob of the lock keys whose releases may be told on a
	// channel that pattern matches (PSUBSCRIBE): a superset is fine, each
	// release's channels are matched against the pattern itself; false
	// when the pattern's fixed start is not one of the library's channels.
	keysOf func(pattern string) (string, bool)
	// channels are the channels on which the library tells the release
	// of key, and payload what it sends.
	channels func(key string) []string
	payload  func(key string) string
}

// springChannel is Spring Integration RedisLockRegistry's PUB_SUB_LOCK
// mode (6.0.7 and later): the lock key is "<registryKey>:<path>", its
// release is published on "<registryKey>-channel:<lockKey>" with the lock
// key as the payload, and waiters PSUBSCRIBE "<registryKey>-channel:*".
// Spring 5.5 published on "<registryKey>-channel" alone, but its unlock
// script checks no owner and is refused (scripts_library.go).
var springChannel = lockChannel{
	library: "Spring Integration RedisLockRegistry (PUB_SUB_LOCK)",
	keyOf: func(channel string) (string, bool) {
		for _, registry := range springRegistries(channel) {
			if key := channel[len(registry)+len(springSuffix):]; strings.HasPrefix(key, registry+":") {
				return globEscape(key), true
			}
		}
		return "", false
	},
	keysOf: func(pattern string) (string, bool) {
		registry, _, ok := strings.Cut(pattern, springSuffix)
		if !ok || registry == "" || hasGlob(registry) {
			return "", false
		}
		return globEscape(registry) + ":*", true
	},
	channels: func(key string) []string {
		// The registry key is not in the release: every split of the key
		// at a colon is a registry key it may belong to.
		var chans []string
		for i := 1; i < len(key); i++ {
			if key[i] == ':' {
				chans = append(chans, key[:i]+springSuffix+key)
			}
		}
		return chans
	},
	payload: func(key string) string { return key },
}

const springSuffix = "-channel:"

// springRegistries are the registry keys channel may be named after: what
// comes before each "-channel:" in it.
func springRegistries(channel string) []string {
	var out []string
	for i := 0; ; {
		j := strings.Index(channel[i:], springSuffix)
		if j < 0 {
			return out
		}
		if i+j > 0 {
			out = append(out, channel[:i+j])
		}
		i += j + 1
	}
}

// lockChannels are the unlock channels served; any other channel is
// refused.
var lockChannels = []*lockChannel{&springChannel, &redissonChannel, &redissonRWChannel}

// channelOf finds the library whose unlock channel name is, and the glob
// of the lock keys it tells of; pattern says name is a PSUBSCRIBE pattern.
func channelOf(name string, pattern bool) (*lockChannel, string, bool) {
	for _, lc := range lockChannels {
		of := lc.keyOf
		if pattern {
			of = lc.keysOf
		}
		if glob, ok := of(name); ok {
			return lc, glob, true
		}
	}
	return nil, "", false
}

// errNotLockChannel refuses a channel that no served library unlocks on.
func errNotLockChannel(verb, name string) *argError {
	return errorf("ERR lockproxy serves %s only for lock libraries' unlock channels (Spring Integration RedisLockRegistry: <registryKey>-channel:<registryKey>:<path>, or PSUBSCRIBE <registryKey>-channel:*; Redisson RLock: redisson_lock__channel:{<name>}; Redisson RReadWriteLock: redisson_rwlock:{<name>}), not '%s'", verb, name)
}

func hasGlob(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// globEscape makes s a glob that matches s alone.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// globMatch reports whether s matches pattern as Redis's PSUBSCRIBE and
// KEYS match: * any run, ? any byte, [abc] [^abc] [a-z] a class, \x the
// byte x.
func globMatch(pattern, s string) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatch(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
			pattern = pattern[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			var ok bool
			if ok, pattern = matchClass(pattern[1:], s[0]); !ok {
				return false
			}
			s = s[1:]
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || s[0] != pattern[0] {
				return false
			}
			s = s[1:]
			pattern = pattern[1:]
		}
	}
	return len(s) == 0
}

// matchClass matches c against the class that pattern starts with (after
// its '['), and returns the pattern after the class. An unclosed class
// ends with the pattern, as in Redis.
func matchClass(pattern string, c byte) (bool, string) {
	not := len(pattern) > 0 && pattern[0] == '^'
	if not {
		pattern = pattern[1:]
	}
	match := false
	for len(pattern) > 0 && pattern[0] != ']' {
		switch {
		case pattern[0] == '\\' && len(pattern) >= 2:
			match = match || pattern[1] == c
			pattern = pattern[2:]
		case len(pattern) >= 3 && pattern[1] == '-':
			lo, hi := pattern[0], pattern[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			match = match || c >= lo && c <= hi
			pattern = pattern[3:]
		default:
			match = match || pattern[0] == c
			pattern = pattern[1:]
		}
	}
	if len(pattern) > 0 {
		pattern = pattern[1:] // the ']'
	}
	return match != not, pattern
}
