package test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The compatibility rows of the Debian-packaged clients: redis-py, the Ruby
// redis gem, phpredis and Perl's Redis, each driven by a program under
// test/compat/<language>/ that follows the contract in compat_test.go.

// debianPython is the interpreter python3-redis installs redis-py for; the
// python3 first in PATH may be another one (pyenv, a virtualenv) without it.
const debianPython = "/usr/bin/python3"

func TestCompatPython(t *testing.T) {
	clientTest(t)
	py := requireTool(t, debianPython, "apt-get install -y python3")
	requireLangLibrary(t, "redis-py", "apt-get install -y python3-redis",
		py, "-c", "import redis; print(redis.__version__)")
	compatSuite(t, []compatClient{
		langProgram("redis-py-Lock", py, "compat/python/redispy_lock.py"),
		langProgram("redis-py-recipe", py, "compat/python/redispy_recipe.py"),
		langProgram("redis-py-watch-recipe", py, "compat/python/redispy_watch.py"),
		langProgram("redis-py-blocking-acquire", py, "compat/python/redispy_blocking.py"),
	})
}

func TestCompatRuby(t *testing.T) {
	clientTest(t)
	ruby := requireTool(t, "ruby", "apt-get install -y ruby ruby-redis")
	requireLangLibrary(t, "the redis gem", "apt-get install -y ruby-redis",
		ruby, "-e", `require "redis"; puts Redis::VERSION`)
	compatSuite(t, []compatClient{langProgram("redis-gem-recipe", ruby, "compat/ruby/recipe.rb")})
}

func TestCompatPHP(t *testing.T) {
	clientTest(t)
	php := requireTool(t, "php", "apt-get install -y php-cli php-redis")
	requireLangLibrary(t, "phpredis", "apt-get install -y php-redis",
		php, "-r", `if (!extension_loaded("redis")) { fwrite(STDERR, "the redis extension is not loaded\n"); exit(1); } echo phpversion("redis"), "\n";`)
	compatSuite(t, []compatClient{langProgram("phpredis-recipe", php, "compat/php/recipe.php")})
}

func TestCompatPerl(t *testing.T) {
	clientTest(t)
	perl := requireTool(t, "perl", "apt-get install -y perl libredis-perl")
	requireLangLibrary(t, "Perl Redis", "apt-get install -y libredis-perl",
		perl, "-MRedis", "-e", `print "$Redis::VERSION\n"`)
	compatSuite(t, []compatClient{langProgram("perl-Redis-recipe", perl, "compat/perl/recipe.pl")})
}

// requireLangLibrary fails, with the command that installs it, when the
// client library is missing: probe (an interpreter and its arguments) must
// load the library and print its version, which is logged.
func requireLangLibrary(t *testing.T, library, install string, probe ...string) {
	t.Helper()
	out, err := exec.Command(probe[0], probe[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s cannot load %s (%v: %s); install it with: %s",
			probe[0], library, err, strings.TrimSpace(string(out)), install)
	}
	t.Logf("%s %s", library, strings.TrimSpace(string(out)))
}

// langProgram is the compatClient that runs the program at path (relative
// to this package) with interpreter.
func langProgram(name, interpreter, path string) compatClient {
	abs, err := filepath.Abs(path)
	if err != nil {
		panic(err)
	}
	return compatClient{name: name, command: func(args ...string) *exec.Cmd {
		return exec.Command(interpreter, append([]string{abs}, args...)...)
	}}
}
