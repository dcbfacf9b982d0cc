package test

import (
	"os/exec"
	"testing"
)

// TestCompatRedisCLI runs redis-cli itself, the recipe from a shell, by the
// compatibility contract.
func TestCompatRedisCLI(t *testing.T) {
	clientTest(t)
	requireTool(t, "redis-cli", "apt-get install -y redis-tools")
	bash := requireTool(t, "bash", "apt-get install -y bash")
	compatSuite(t, []compatClient{{
		name: "redis-cli recipe",
		command: func(args ...string) *exec.Cmd {
			return exec.Command(bash, append([]string{"compat/cli/redis-cli.sh"}, args...)...)
		},
	}, {
		name: "redis-cli blocking acquire",
		command: func(args ...string) *exec.Cmd {
			return exec.Command(bash, append([]string{"compat/cli/blocking-acquire.sh"}, args...)...)
		},
	}})
}
