package quorum

import (
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redistest"
)

// TestCostCuts: every cut of a build made for measuring (cost.go) finds
// what it cuts in the scripts, so that a script rewritten since cannot
// leave a feature's cost in a build that claims to measure without it;
// and every script of every such build loads, and its lock cycle works.
func TestCostCuts(t *testing.T) {
	var all strings.Builder
	for _, s := range allScripts {
		all.WriteString(s.Source())
	}
	for _, c := range costCuts {
		if !strings.Contains(all.String(), c.old) {
			t.Errorf("the %s cut finds no %q in any script", c.feature, c.old)
		}
	}
	if !strings.Contains(all.String(), leaseRead) {
		t.Errorf("no script starts with the lease read %s", leaseRead)
	}

	d := redistest.Start(t).Client(t)
	ctx := t.Context()
	for _, f := range append([]string{"all"}, costFeatures...) {
		off := parseCostOff(f)
		for _, s := range allScripts {
			if err := d.ScriptLoad(ctx, cutCosts(s.Source(), off)).Err(); err != nil {
				t.Errorf("without %s: %v\n%.300s", f, err, cutCosts(s.Source(), off))
			}
		}
		key := "cost:" + f
		stamp, err := d.Eval(ctx, cutCosts(acquireScript.Source(), off), []string{key}, "t", 10000, "epoch:1:x:").Int64()
		if err != nil || stamp <= 0 {
			t.Errorf("without %s: acquire %d, %v", f, stamp, err)
		}
		if n, err := d.Eval(ctx, cutCosts(plainValues.release.Source(), off), []string{key}, "t", newReleaseID()).Int(); err != nil || n != 1 {
			t.Errorf("without %s: release %d, %v", f, n, err)
		}
	}

	if off := parseCostOff("stamp"); !off["horizon"] {
		t.Error("a build without the stamp keeps the horizon, which records it")
	}
	if got := parseCostOff("all").String(); got != strings.Join(costFeatures, ",") {
		t.Errorf("all is %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("an unknown feature was taken")
		}
	}()
	parseCostOff("nosuch")
}
