# The redis.io lock recipe with the Ruby redis gem (Debian ruby-redis)
# through lockproxy: SET NX PX to acquire, EVAL compare-and-delete to release,
# EVAL compare-and-pexpire to extend.
#
# Follows the compatibility contract of test/compat_test.go:
#
#   ruby recipe.rb contend ADDR LOGFILE ROUNDS WORKER
#   ruby recipe.rb scenario ADDR
#   ruby recipe.rb suite ADDR LOGFILE ROUNDS WORKERS

require "digest/sha1"
require "redis"
require "securerandom"

CONTENDED = "compat:contended"
SCENARIO = "compat:scenario"

RELEASE = <<~LUA
  if redis.call("get",KEYS[1]) == ARGV[1] then
      return redis.call("del",KEYS[1])
  else
      return 0
  end
LUA

EXTEND = <<~LUA
  if redis.call("get",KEYS[1]) == ARGV[1] then
      return redis.call("pexpire",KEYS[1],ARGV[2])
  else
      return 0
  end
LUA

def connect(addr)
  host, port = addr.split(":", 2)
  Redis.new(host: host, port: Integer(port), timeout: 10)
end

def acquire(r, key, token, ttl_ms)
  r.set(key, token, nx: true, px: ttl_ms)
end

def release(r, key, token)
  r.eval(RELEASE, keys: [key], argv: [token])
end

def extend_lock(r, key, token, ttl_ms)
  r.eval(EXTEND, keys: [key], argv: [token, ttl_ms])
end

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def contend(addr, logfile, rounds, worker)
  r = connect(addr)
  # "a" opens with O_APPEND; syswrite is one write(2) per line.
  log = File.open(logfile, "a")
  log.sync = true
  rounds.times do |n|
    token = SecureRandom.hex(16)
    deadline = now + 60
    until acquire(r, CONTENDED, token, 10_000)
      abort "worker #{worker} round #{n}: not acquired within 60 s" if now > deadline
      sleep(0.002 + rand * 0.003)
    end
    log.syswrite("enter #{worker}-#{n}\n")
    sleep 0.002
    log.syswrite("exit #{worker}-#{n}\n")
    got = release(r, CONTENDED, token)
    abort "worker #{worker} round #{n}: release as owner returned #{got.inspect}" unless got == 1
  end
  log.close
end

def scenario(addr)
  r = connect(addr)
  failed = []
  check = lambda do |name, got, want|
    if got == want
      puts "ok   #{name}"
    else
      puts "FAIL #{name}: got #{got.inspect}, want #{want.inspect}"
      failed << name
    end
    $stdout.flush
  end

  owner = SecureRandom.hex(16)
  other = SecureRandom.hex(16)
  check.("acquire", acquire(r, SCENARIO, owner, 10_000), true)
  check.("acquire with another token while held", acquire(r, SCENARIO, other, 10_000), false)
  check.("extend as owner", extend_lock(r, SCENARIO, owner, 20_000), 1)
  pttl = r.pttl(SCENARIO)
  check.("PTTL after extend above the first TTL", pttl > 10_000 && pttl <= 20_000, true)
  check.("extend with another token", extend_lock(r, SCENARIO, other, 20_000), 0)
  check.("release with another token", release(r, SCENARIO, other), 0)
  check.("still held by the owner", r.get(SCENARIO), owner)
  check.("release as owner", release(r, SCENARIO, owner), 1)
  check.("free after release", r.get(SCENARIO), nil)
  check.("release again as owner", release(r, SCENARIO, owner), 0)
  check.("acquire again", acquire(r, SCENARIO, other, 10_000), true)
  # The same release by its SHA1, as apps that cache their scripts send it.
  check.("SCRIPT LOAD of the release script", r.script(:load, RELEASE), Digest::SHA1.hexdigest(RELEASE))
  check.("release the new holding by EVALSHA", r.evalsha(Digest::SHA1.hexdigest(RELEASE), keys: [SCENARIO], argv: [other]), 1)
  check.("free at the end", r.get(SCENARIO), nil)

  abort "#{failed.length} checks failed: #{failed.join(', ')}" unless failed.empty?
end

# The workers are threads, each with its own Redis: the proxy sees WORKERS
# clients, and ruby starts once. The scenario runs whatever the workers did,
# so that one run reports both.
def suite(addrs, logfile, rounds, workers)
  addrs = addrs.split(",")
  threads = Array.new(workers) do |w|
    Thread.new do
      contend(addrs[w % addrs.length], logfile, rounds, w.to_s)
      nil
    rescue SystemExit, StandardError => e
      # abort has already printed its message; any other error has not.
      warn "FAIL worker #{w}: #{e.message}" unless e.is_a?(SystemExit)
      w
    end
  end
  failed = threads.map(&:value).compact
  scenario(addrs[0])
  abort "#{failed.length} of #{workers} workers failed: #{failed.join(', ')}" unless failed.empty?
end

case ARGV[0]
when "contend"
  abort "usage: recipe.rb contend ADDR LOGFILE ROUNDS WORKER" unless ARGV.length == 5
  contend(ARGV[1], ARGV[2], Integer(ARGV[3]), ARGV[4])
when "scenario"
  abort "usage: recipe.rb scenario ADDR" unless ARGV.length == 2
  scenario(ARGV[1])
when "suite"
  abort "usage: recipe.rb suite ADDR LOGFILE ROUNDS WORKERS" unless ARGV.length == 5
  suite(ARGV[1], ARGV[2], Integer(ARGV[3]), Integer(ARGV[4]))
else
  abort "usage: recipe.rb contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS"
end
