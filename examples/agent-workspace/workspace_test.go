package main

import (
	"fmt"
	"testing"
)

func TestChooseImage(t *testing.T) {
	im := Images{Python: "py", Node: "nd", Canary: "canary", CanaryPercent: 10}
	for _, c := range []struct{ id, tc, pinned, img, why string }{
		{"x", "python", "pinned-img", "pinned-img", "pinned"},
		{"x", "nope", "pinned-img", "pinned-img", "pinned"}, // a pin wins over everything
	} {
		img, why, err := chooseImage(im, c.id, c.tc, c.pinned)
		if err != nil || img != c.img || why != c.why {
			t.Errorf("%+v: got %s %s %v", c, img, why, err)
		}
	}
	if _, _, err := chooseImage(im, "x", "ruby", ""); err == nil {
		t.Fatal("unknown toolchain accepted")
	}
	// The canary goes to about CanaryPercent of ids, the same ones each
	// time; everything else gets its toolchain's image.
	canaries := 0
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("ws-%d", i)
		img, why, _ := chooseImage(im, id, "node", "")
		img2, _, _ := chooseImage(im, id, "node", "")
		if img != img2 {
			t.Fatalf("%s: unstable choice %s then %s", id, img, img2)
		}
		switch why {
		case "canary":
			canaries++
		case "toolchain":
			if img != "nd" {
				t.Fatalf("node toolchain got %s", img)
			}
		}
	}
	if canaries < 50 || canaries > 150 {
		t.Fatalf("%d of 1000 ids in a 10%% canary", canaries)
	}
	if img, _, _ := chooseImage(Images{Python: "py"}, "ws-1", "python", ""); img != "py" {
		t.Fatalf("no canary configured: %s", img)
	}
}

func TestChooseInstance(t *testing.T) {
	if chooseInstance("build") != "standard-2" || chooseInstance("chat") != "standard-1" || chooseInstance("") != "standard-1" {
		t.Fatal("instance choice")
	}
}
