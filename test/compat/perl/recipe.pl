#!/usr/bin/perl
# The redis.io lock recipe with the Perl Redis module (Debian libredis-perl)
# through lockproxy: SET NX PX to acquire, EVAL compare-and-delete to release,
# EVAL compare-and-pexpire to extend.
#
# Follows the compatibility contract of test/compat_test.go:
#
#   perl recipe.pl contend ADDR LOGFILE ROUNDS WORKER
#   perl recipe.pl scenario ADDR
#   perl recipe.pl suite ADDR LOGFILE ROUNDS WORKERS

use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use Fcntl qw(O_APPEND O_CREAT O_WRONLY);
use POSIX ();
use Redis;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC sleep);

my $CONTENDED = 'compat:contended';
my $SCENARIO  = 'compat:scenario';

my $RELEASE = <<'LUA';
if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end
LUA

my $EXTEND = <<'LUA';
if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("pexpire",KEYS[1],ARGV[2])
else
    return 0
end
LUA

$| = 1;

sub connect_to {
    my ($addr) = @_;
    return Redis->new(server => $addr, cnx_timeout => 10, read_timeout => 10, write_timeout => 10);
}

sub token { return join '', map { sprintf '%02x', int rand 256 } 1 .. 16 }

# 'OK' when acquired, undef when held elsewhere; an error reply dies.
sub acquire {
    my ($r, $key, $token, $ttl) = @_;
    return $r->set($key, $token, 'NX', 'PX', $ttl);
}

sub release {
    my ($r, $key, $token) = @_;
    return $r->eval($RELEASE, 1, $key, $token);
}

sub extend {
    my ($r, $key, $token, $ttl) = @_;
    return $r->eval($EXTEND, 1, $key, $token, $ttl);
}

sub contend {
    my ($addr, $logfile, $rounds, $worker) = @_;
    my $r = connect_to($addr);
    sysopen(my $log, $logfile, O_WRONLY | O_APPEND | O_CREAT, 0644) or die "open $logfile: $!\n";
    for my $n (0 .. $rounds - 1) {
        my $token    = token();
        my $deadline = clock_gettime(CLOCK_MONOTONIC) + 60;
        until (acquire($r, $CONTENDED, $token, 10000)) {
            die "worker $worker round $n: not acquired within 60 s\n" if clock_gettime(CLOCK_MONOTONIC) > $deadline;
            sleep(0.002 + rand(0.003));
        }
        syswrite($log, "enter $worker-$n\n") or die "write: $!\n";
        sleep(0.002);
        syswrite($log, "exit $worker-$n\n") or die "write: $!\n";
        my $got = release($r, $CONTENDED, $token);
        die "worker $worker round $n: release as owner returned " . show($got) . "\n" unless defined $got && $got eq '1';
    }
    close $log;
}

sub show { my ($v) = @_; return defined $v ? "'$v'" : 'undef' }

sub scenario {
    my ($addr) = @_;
    my $r = connect_to($addr);
    my @failed;
    # Each check runs its call itself, so that an error reply (which Redis.pm
    # raises with die) fails that check alone.
    my $check = sub {
        my ($name, $call, $want) = @_;
        my $got = eval { $call->() };
        if (my $err = $@) {
            chomp $err;
            print "FAIL $name: died: $err\n";
            push @failed, $name;
        } elsif ((defined $got ? "'$got'" : 'undef') eq (defined $want ? "'$want'" : 'undef')) {
            print "ok   $name\n";
        } else {
            print "FAIL $name: got " . show($got) . ", want " . show($want) . "\n";
            push @failed, $name;
        }
    };

    my ($owner, $other) = (token(), token());
    $check->('acquire',                               sub { acquire($r, $SCENARIO, $owner, 10000) }, 'OK');
    $check->('acquire with another token while held', sub { acquire($r, $SCENARIO, $other, 10000) }, undef);
    $check->('extend as owner',                       sub { extend($r, $SCENARIO, $owner, 20000) },  1);
    $check->('PTTL after extend above the first TTL', sub { my $t = $r->pttl($SCENARIO); $t > 10000 && $t <= 20000 ? 1 : "pttl $t" }, 1);
    $check->('extend with another token',             sub { extend($r, $SCENARIO, $other, 20000) }, 0);
    $check->('release with another token',            sub { release($r, $SCENARIO, $other) },        0);
    $check->('still held by the owner',               sub { $r->get($SCENARIO) },                    $owner);
    $check->('release as owner',                      sub { release($r, $SCENARIO, $owner) },        1);
    $check->('free after release',                    sub { $r->get($SCENARIO) },                    undef);
    $check->('release again as owner',                sub { release($r, $SCENARIO, $owner) },        0);
    $check->('acquire again',                         sub { acquire($r, $SCENARIO, $other, 10000) }, 'OK');
    # The same release by its SHA1, as apps that cache their scripts send it.
    $check->('SCRIPT LOAD of the release script', sub { $r->script_load($RELEASE) }, sha1_hex($RELEASE));
    $check->('release the new holding by EVALSHA', sub { $r->evalsha(sha1_hex($RELEASE), 1, $SCENARIO, $other) }, 1);
    $check->('free at the end',                    sub { $r->get($SCENARIO) }, undef);

    die scalar(@failed) . " checks failed: " . join(', ', @failed) . "\n" if @failed;
}

# The workers are forked processes, each connecting after the fork: Perl's
# threads copy the whole interpreter, and fork is as cheap and shares no
# client. The scenario runs whatever the workers did, so that one run
# reports both.
sub suite {
    my ($addrs, $logfile, $rounds, $workers) = @_;
    my @addrs = split /,/, $addrs;
    my %worker_of;
    for my $w (0 .. $workers - 1) {
        my $pid = fork // die "fork: $!\n";
        if ($pid == 0) {
            my $ok = eval { contend($addrs[$w % @addrs], $logfile, $rounds, $w); 1 };
            print STDERR "FAIL worker $w: $@" unless $ok;
            # POSIX::_exit: the parent's END blocks and buffers are its own.
            POSIX::_exit($ok ? 0 : 1);
        }
        $worker_of{$pid} = $w;
    }
    my @failed;
    while ((my $pid = wait) > 0) {
        push @failed, $worker_of{$pid} if $?;
    }
    scenario($addrs[0]);
    die scalar(@failed) . " of $workers workers failed: " . join(', ', sort { $a <=> $b } @failed) . "\n" if @failed;
}

my ($mode, @args) = @ARGV;
if (defined $mode && $mode eq 'contend' && @args == 4) {
    contend(@args);
} elsif (defined $mode && $mode eq 'scenario' && @args == 1) {
    scenario(@args);
} elsif (defined $mode && $mode eq 'suite' && @args == 4) {
    suite(@args);
} else {
    die "usage: recipe.pl contend ADDR LOGFILE ROUNDS WORKER | scenario ADDR | suite ADDR LOGFILE ROUNDS WORKERS\n";
}
