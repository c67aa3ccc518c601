package filetype

import "testing"

func TestDetect(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	for _, tc := range []struct {
		name   string
		head   []byte
		want   string
		binary bool
	}{
		{"a.txt", []byte("hello\n"), "text/plain; charset=utf-8", false},
		{"run.sh", []byte("#!/bin/sh\necho hi\n"), "text/x-shellscript; charset=utf-8", false},
		{"main.py", []byte("print(1)\n"), "text/x-python; charset=utf-8", false},
		{"data.json", []byte(`{"a":1}`), "application/json; charset=utf-8", false},
		{"noext", []byte("just words"), "text/plain; charset=utf-8", false},
		{"noext", png, "image/png", true},
		{"pic.png", png, "image/png", true},
		{"lies.txt", png, "image/png", true},
		{"blob.txt", []byte{0, 1, 2, 3}, "application/octet-stream", true},
		{"blob", []byte{0xff, 0xfe, 0x00, 0x41}, "application/octet-stream", true},
		{"page.html", []byte("<!doctype html><p>x"), "text/html; charset=utf-8", false},
		{"empty", nil, "text/plain; charset=utf-8", false},
		{"utf8.md", []byte("# caf\xc3\xa9"), "text/markdown; charset=utf-8", false},
		// A rune cut by the end of the sniffed window is still text.
		{"cut.txt", append(make([]byte, 0), append([]byte("ab"), 0xe2, 0x82)...), "text/plain; charset=utf-8", false},
		{"x.tar.gz", []byte("\x1f\x8b\x08\x00"), "application/gzip", true},
	} {
		got, bin := Detect(tc.name, tc.head)
		if got != tc.want || bin != tc.binary {
			t.Errorf("Detect(%q, %q) = %q, %v; want %q, %v", tc.name, tc.head, got, bin, tc.want, tc.binary)
		}
	}
}
