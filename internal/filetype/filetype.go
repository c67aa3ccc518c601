package filetype

import (
	"net/http"
	"path"
	"strings"
	"unicode/utf8"
)

// SniffLen is how many leading bytes Detect looks at (as
// net/http.DetectContentType).
const SniffLen = 512

// byExt maps a lower-case extension to its media type. Text types get
// "; charset=utf-8" added by Detect.
var byExt = map[string]string{
	".txt": "text/plain", ".log": "text/plain", ".md": "text/markdown", ".markdown": "text/markdown",
	".rst": "text/x-rst", ".csv": "text/csv", ".tsv": "text/tab-separated-values",
	".html": "text/html", ".htm": "text/html", ".css": "text/css", ".xml": "text/xml",
	".js": "text/javascript", ".mjs": "text/javascript", ".cjs": "text/javascript",
	".jsx": "text/jsx", ".ts": "text/x-typescript", ".tsx": "text/x-typescript",
	".json": "application/json", ".jsonl": "application/jsonl", ".ndjson": "application/x-ndjson",
	".yaml": "application/yaml", ".yml": "application/yaml", ".toml": "application/toml",
	".ini": "text/plain", ".cfg": "text/plain", ".conf": "text/plain", ".env": "text/plain",
	".py": "text/x-python", ".ipynb": "application/x-ipynb+json", ".rb": "text/x-ruby",
	".go": "text/x-go", ".rs": "text/x-rust", ".java": "text/x-java", ".kt": "text/x-kotlin",
	".c": "text/x-c", ".h": "text/x-c", ".cc": "text/x-c++", ".cpp": "text/x-c++", ".hpp": "text/x-c++",
	".cs": "text/x-csharp", ".php": "text/x-php", ".pl": "text/x-perl", ".lua": "text/x-lua",
	".r": "text/x-r", ".swift": "text/x-swift", ".scala": "text/x-scala", ".sql": "application/sql",
	".sh": "text/x-shellscript", ".bash": "text/x-shellscript", ".zsh": "text/x-shellscript",
	".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
	".gif": "image/gif", ".webp": "image/webp", ".bmp": "image/bmp", ".ico": "image/vnd.microsoft.icon",
	".avif": "image/avif", ".tif": "image/tiff", ".tiff": "image/tiff",
	".pdf": "application/pdf", ".zip": "application/zip", ".gz": "application/gzip",
	".tgz": "application/gzip", ".tar": "application/x-tar", ".bz2": "application/x-bzip2",
	".xz": "application/x-xz", ".zst": "application/zstd", ".7z": "application/x-7z-compressed",
	".wasm": "application/wasm", ".mp3": "audio/mpeg", ".wav": "audio/wav", ".ogg": "audio/ogg",
	".mp4": "video/mp4", ".webm": "video/webm", ".woff": "font/woff", ".woff2": "font/woff2",
	".ttf": "font/ttf", ".otf": "font/otf", ".parquet": "application/vnd.apache.parquet",
	".sqlite": "application/vnd.sqlite3", ".db": "application/octet-stream",
}

// textual reports a media type whose content is text.
func textual(t string) bool {
	if strings.HasPrefix(t, "text/") {
		return true
	}
	switch t {
	case "application/json", "application/jsonl", "application/x-ndjson", "application/yaml",
		"application/toml", "application/sql", "application/x-ipynb+json", "image/svg+xml":
		return true
	}
	return false
}

// Binary reports whether head (a file's first bytes, possibly cut short)
// is binary: it holds a NUL byte or is not UTF-8.
func Binary(head []byte) bool {
	for len(head) > 0 {
		c := head[0]
		if c == 0 {
			return true
		}
		if c < utf8.RuneSelf {
			head = head[1:]
			continue
		}
		r, n := utf8.DecodeRune(head)
		if r == utf8.RuneError && n <= 1 {
			// A rune cut by the end of the window is still text.
			return !(len(head) < utf8.UTFMax && !utf8.FullRune(head))
		}
		head = head[n:]
	}
	return false
}

// Detect returns the media type (with "; charset=utf-8" for text) and
// whether the content is binary, from the file's name and its first bytes
// (at most SniffLen are used).
func Detect(name string, head []byte) (mimeType string, binary bool) {
	if len(head) > SniffLen {
		head = head[:SniffLen]
	}
	binary = Binary(head)
	t := byExt[strings.ToLower(path.Ext(name))]
	if t == "" || (textual(t) && binary) {
		t = http.DetectContentType(head)
		if i := strings.IndexByte(t, ';'); i >= 0 {
			t = t[:i]
		}
		if textual(t) && binary {
			t = "application/octet-stream"
		}
		if t == "application/octet-stream" && !binary {
			t = "text/plain" // UTF-8 the sniffer did not recognise
		}
	}
	if textual(t) {
		return t + "; charset=utf-8", binary
	}
	return t, binary
}
