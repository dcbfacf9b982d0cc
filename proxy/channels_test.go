package proxy

import (
	"slices"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"reg-channel:*", "reg-channel:reg:a", true},
		{"reg-channel:*", "reg-channel", false},
		{"*", "", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a[bc]d", "acd", true},
		{"a[^bc]d", "acd", false},
		{"a[a-c]d", "abd", true},
		{"a[c-a]d", "abd", true},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a[b", "ab", true},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
	if got := globEscape(`a*b?[c]\`); !globMatch(got, `a*b?[c]\`) || globMatch(got, `aXb?[c]\`) {
		t.Errorf("globEscape gave %q", got)
	}
}

func TestSpringChannel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pattern bool
		glob    string
		ok      bool
	}{
		{"reg-channel:reg:a", false, "reg:a", true},
		{"reg-channel:reg:a*", false, `reg:a\*`, true},
		{"a-channel:x-channel:a:p", false, "", false},
		{"a-channel:a-channel:a:p", false, "", false},
		// Registry keys that hold "-channel:" themselves.
		{"x-channel:a-channel:x-channel:a:p", false, "x-channel:a:p", true},
		{"x-channel:a-channel:x:p", false, "", false},
		{"a-channel:x-channel:a-channel:x:p", false, "a-channel:x:p", true},
		{"reg-channel:other:a", false, "", false},
		{"reg-channel", false, "", false},
		{"reg-channel:*", true, "reg:*", true},
		{"reg-channel:reg:a?", true, "reg:*", true},
		{"r*-channel:*", true, "", false},
		{"*", true, "", false},
	} {
		lc, glob, ok := channelOf(tc.name, tc.pattern)
		if ok != tc.ok || glob != tc.glob || ok && lc != &springChannel {
			t.Errorf("channelOf(%q, %v) = %q, %v; want %q, %v", tc.name, tc.pattern, glob, ok, tc.glob, tc.ok)
		}
	}
	if got, want := springChannel.channels("a:b:c"), []string{"a-channel:a:b:c", "a:b-channel:a:b:c"}; !slices.Equal(got, want) {
		t.Errorf("channels of a:b:c: %q, want %q", got, want)
	}
}
