package e2b

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// An E2B build recipe as a Dockerfile. Every value the SDK sends is
// hostile input: RUN commands go in JSON exec form (no Dockerfile
// expansion, newlines kept), ENV values are quoted, and paths, users and
// keys outside a plain character set are refused rather than escaped.

var (
	plainPathRE = regexp.MustCompile(`^[A-Za-z0-9/._@+=,-]+$`)
	plainUserRE = regexp.MustCompile(`^[a-z_][a-z0-9_.-]*(:[a-z_][a-z0-9_.-]*)?$|^[0-9]+(:[0-9]+)?$`)
	envKeyRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	octalModeRE = regexp.MustCompile(`^0?[0-7]{3,4}$`)
)

// stockUser is the default user of the stock base, as of E2B's templates:
// steps and sandboxes run as it unless the recipe says otherwise.
const stockUser = "user"

func encodeLabel(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func decodeLabel(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return ""
	}
	return string(b)
}

// templateDockerfile translates a recipe; files are the uploaded file sets
// the context must carry (by path), in order of first use. uploaded maps a
// files hash to where its upload is kept.
func templateDockerfile(base string, body buildStartBody, buildID string, uploaded func(hash string) string) (string, []string, error) {
	if strings.ContainsAny(base, " \t\r\n\"\\$") {
		return "", nil, errdefs.InvalidArgument("invalid base image %q", base)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FROM %s\n", base)
	cur := ""
	if base == "debian-trixie" {
		cur = stockUser
		fmt.Fprintf(&b, "USER %s\n", cur)
	}
	var files []string
	seen := map[string]bool{}
	bad := func(i int, st templateStep, format string, args ...any) error {
		return errdefs.InvalidArgument("step %d (%s): %s", i+1, st.Type, fmt.Sprintf(format, args...))
	}
	for i, st := range body.Steps {
		switch st.Type {
		case "RUN":
			if len(st.Args) < 1 || len(st.Args) > 2 || strings.TrimSpace(st.Args[0]) == "" {
				return "", nil, bad(i, st, "want [command] or [command, user]")
			}
			argv, _ := json.Marshal([]string{"/bin/sh", "-c", st.Args[0]})
			user := ""
			if len(st.Args) == 2 {
				user = st.Args[1]
			}
			if user != "" && user != cur {
				if !plainUserRE.MatchString(user) {
					return "", nil, bad(i, st, "invalid user %q", user)
				}
				fmt.Fprintf(&b, "USER %s\nRUN %s\n", user, argv)
				back := cur
				if back == "" {
					back = "root"
				}
				fmt.Fprintf(&b, "USER %s\n", back)
				continue
			}
			fmt.Fprintf(&b, "RUN %s\n", argv)
		case "COPY":
			if len(st.Args) < 2 || len(st.Args) > 4 {
				return "", nil, bad(i, st, "want [src, dest, user, mode]")
			}
			src, dest := path.Clean(st.Args[0]), st.Args[1]
			switch {
			case strings.ContainsAny(st.Args[0], "*?["):
				return "", nil, bad(i, st, "source %q: wildcards are not supported by berth; copy a file or a directory", st.Args[0])
			case path.IsAbs(src) || src == ".." || strings.HasPrefix(src, "../"):
				return "", nil, bad(i, st, "source %q is outside the template's context", st.Args[0])
			case !plainPathRE.MatchString(src) || !plainPathRE.MatchString(dest):
				return "", nil, bad(i, st, "source %q or destination %q has characters berth does not copy (use letters, digits and /._@+=,-)", st.Args[0], dest)
			case !hashRE.MatchString(st.FilesHash):
				return "", nil, bad(i, st, "no filesHash")
			}
			if _, err := os.Stat(uploaded(st.FilesHash)); err != nil {
				return "", nil, bad(i, st, "the files of %q (%s) were not uploaded", st.Args[0], st.FilesHash[:12])
			}
			if !seen[st.FilesHash] {
				seen[st.FilesHash] = true
				files = append(files, st.FilesHash)
			}
			flags := ""
			user := cur
			if len(st.Args) > 2 && st.Args[2] != "" {
				user = st.Args[2]
			}
			if user != "" {
				if !plainUserRE.MatchString(user) {
					return "", nil, bad(i, st, "invalid user %q", user)
				}
				flags += " --chown=" + user
			}
			if len(st.Args) > 3 && st.Args[3] != "" {
				if !octalModeRE.MatchString(st.Args[3]) {
					return "", nil, bad(i, st, "invalid mode %q (want octal, like 0755)", st.Args[3])
				}
				flags += " --chmod=" + st.Args[3]
			}
			paths, _ := json.Marshal([]string{"files/" + st.FilesHash + "/" + src, dest})
			fmt.Fprintf(&b, "COPY%s %s\n", flags, paths)
		case "ENV":
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return "", nil, bad(i, st, "want key, value pairs")
			}
			b.WriteString("ENV")
			for j := 0; j < len(st.Args); j += 2 {
				k, v := st.Args[j], st.Args[j+1]
				if !envKeyRE.MatchString(k) {
					return "", nil, bad(i, st, "invalid variable name %q", k)
				}
				if strings.ContainsAny(v, "\r\n\x00") {
					return "", nil, bad(i, st, "the value of %s has a line break or NUL", k)
				}
				fmt.Fprintf(&b, " %s=%s", k, quoteDockerfile(v))
			}
			b.WriteString("\n")
		case "WORKDIR":
			if len(st.Args) != 1 || !plainPathRE.MatchString(st.Args[0]) {
				return "", nil, bad(i, st, "want one path of letters, digits and /._@+=,-")
			}
			fmt.Fprintf(&b, "WORKDIR %s\n", st.Args[0])
		case "USER":
			if len(st.Args) != 1 || !plainUserRE.MatchString(st.Args[0]) {
				return "", nil, bad(i, st, "want one user name")
			}
			cur = st.Args[0]
			fmt.Fprintf(&b, "USER %s\n", cur)
		default:
			return "", nil, bad(i, st, "berth does not support this step type (it builds RUN, COPY, ENV, WORKDIR and USER)")
		}
	}
	fmt.Fprintf(&b, "LABEL %s=%s", labelTplBuild, buildID)
	if body.StartCmd != "" {
		fmt.Fprintf(&b, " %s=%s", labelTplStart, encodeLabel(body.StartCmd))
	}
	if body.ReadyCmd != "" {
		if body.StartCmd == "" {
			return "", nil, errdefs.InvalidArgument("readyCmd needs a startCmd")
		}
		fmt.Fprintf(&b, " %s=%s", labelTplReady, encodeLabel(body.ReadyCmd))
	}
	b.WriteString("\n")
	return b.String(), files, nil
}

// quoteDockerfile double-quotes v for an ENV instruction: backslash,
// quote and $ escaped, so the value is taken literally.
func quoteDockerfile(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(v) + `"`
}

// writeTemplateContext writes the build context: the Dockerfile, then
// each uploaded file set under files/<hash>/. Entry names of an upload
// must stay inside it (the SDK writes paths relative to its context);
// one that climbs out or is absolute fails the build. The builder then
// unpacks the context with the image unpacker's rules.
func writeTemplateContext(w io.Writer, dockerfile string, files []string, uploaded func(hash string) string) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, dockerfile); err != nil {
		return err
	}
	for _, hash := range files {
		if err := copyUpload(tw, hash, uploaded(hash)); err != nil {
			return err
		}
	}
	return tw.Close()
}

func copyUpload(tw *tar.Writer, hash, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return errdefs.InvalidArgument("file set %s: %w", hash[:12], err)
		}
		defer zr.Close()
		r = zr
	}
	prefix := "files/" + hash + "/"
	inside := func(name string) (string, error) {
		c := path.Clean(name)
		if path.IsAbs(name) || c == ".." || strings.HasPrefix(c, "../") {
			return "", errdefs.InvalidArgument("file set %s: entry %q is outside the template's context", hash[:12], name)
		}
		return prefix + c, nil
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errdefs.InvalidArgument("file set %s: %w", hash[:12], err)
		}
		if path.Clean(hdr.Name) == "." {
			continue
		}
		if hdr.Name, err = inside(hdr.Name); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeLink {
			if hdr.Linkname, err = inside(hdr.Linkname); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
