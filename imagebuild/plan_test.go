package imagebuild

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestParseRefusesUnsupported(t *testing.T) {
	for _, tc := range []struct{ df, want string }{
		{"FROM a\nRUN --mount=type=secret,id=x cat /run/secrets/x\n", "line 2: RUN: --mount"},
		{"FROM a\nRUN --network=host true\n", "line 2: RUN: --network"},
		{"FROM a\n\nHEALTHCHECK CMD true\n", "line 3: HEALTHCHECK"},
		{"FROM a\nONBUILD RUN true\n", "line 2: ONBUILD"},
		{"FROM a\nVOLUME /data\n", "line 2: VOLUME"},
		{"FROM a\nADD https://example.com/x.tar /\n", "line 2: ADD: remote sources"},
		{"FROM a\nCOPY --chmod=u+x a /a\n", "line 2: COPY: --chmod"},
		{"FROM a\nCOPY --exclude=*.md . /\n", "line 2: COPY: --exclude"},
		{"FROM --platform=linux/arm64 a\n", "line 1: FROM --platform"},
		{"RUN true\n", "Dockerfile"},
		{"", "Dockerfile"},
	} {
		_, err := parse([]byte(tc.df))
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want invalid argument naming %q", tc.df, err, tc.want)
		}
	}
	// Negative control: the supported set parses.
	ok := "ARG BASE=debian\nFROM ${BASE} AS one\nRUN true\nFROM one\nARG X=1\nENV A=b\nWORKDIR /w\nUSER 1000\n" +
		"LABEL k=v\nEXPOSE 80/tcp\nCOPY --from=one --chown=1:1 --chmod=0755 /a /b\nADD x.tar /\nSHELL [\"/bin/bash\",\"-c\"]\n" +
		"STOPSIGNAL SIGTERM\nCMD [\"x\"]\nENTRYPOINT [\"y\"]\n"
	p, err := parse([]byte(ok))
	if err != nil {
		t.Fatalf("supported Dockerfile refused: %v", err)
	}
	if len(p.stages) != 2 || len(p.metaArgs) != 1 {
		t.Fatalf("stages %d, meta args %d", len(p.stages), len(p.metaArgs))
	}
}

func TestCleanSource(t *testing.T) {
	for _, bad := range []string{"../../etc/shadow", "..", "a/../../b"} {
		if _, err := cleanSource(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v, want invalid argument", bad, err)
		}
	}
	for in, want := range map[string]string{"a/b": "a/b", "/a/./b/": "a/b", "a/../b": "b", ".": ""} {
		if got, err := cleanSource(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestChainKeys(t *testing.T) {
	a := chain("p", "RUN x")
	if a != chain("p", "RUN x") || a == chain("p", "RUN y") || a == chain("q", "RUN x") || chain("p", "ab", "c") == chain("p", "a", "bc") {
		t.Fatal("chain keys must depend on every part, unambiguously")
	}
}
