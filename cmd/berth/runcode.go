package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

// maxRunCodeInput bounds the code read from stdin or a file; the server
// takes at most 16 MiB of code.
const maxRunCodeInput = 16 << 20

func (a *app) runCodeCmd() *cobra.Command {
	var (
		lang, contextID, file, outDir string
		env                           []string
		timeout                       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run-code NAME [flags] < FILE",
		Short: "Run Python, JavaScript or TypeScript in a sandbox's code interpreter",
		Long: `Run code in a persistent interpreter in the sandbox, notebook style: state
(variables, imports) persists across runs of the same context, and the
value of the last expression is printed. Output streams as it happens.

Without --context the code runs in the sandbox's default context of --lang.
Image results (matplotlib charts, PNG/JPEG/SVG values) are saved as
result-1.png, result-2.svg ... in --out (default: the current directory).
On a timeout the code is interrupted (KeyboardInterrupt in Python); the
context survives. Exits 1 when the code raised an error.

Examples:
  berth run-code demo --lang python < analysis.py
  echo 'console.log(await Promise.resolve(42))' | berth run-code demo --lang js
  berth run-code demo --context 3f2a... -f step2.py --out charts/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in io.Reader = a.stdin
			if file != "" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			code, err := io.ReadAll(io.LimitReader(in, maxRunCodeInput+1))
			if err != nil {
				return fmt.Errorf("reading code: %w", err)
			}
			if len(code) > maxRunCodeInput {
				return fmt.Errorf("code is larger than %d MiB", maxRunCodeInput>>20)
			}
			req := api.RunCodeRequest{Code: string(code), Context: contextID, TimeoutMs: timeout.Milliseconds()}
			if contextID == "" {
				req.Language = lang
			}
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			saved := 0
			var saveErr error
			save := func(ext, b64 string) {
				data, err := base64.StdEncoding.DecodeString(b64)
				if err != nil {
					saveErr = fmt.Errorf("result is not valid base64: %w", err)
					return
				}
				saved++
				p := filepath.Join(outDir, fmt.Sprintf("result-%d.%s", saved, ext))
				if err := os.WriteFile(p, data, 0o644); err != nil {
					saveErr = err
					return
				}
				fmt.Fprintf(a.stderr, "berth: saved %s\n", p)
			}
			res, err := c.RunCode(cmd.Context(), args[0], req, func(ev api.CodeEvent) {
				switch ev.Type {
				case api.CodeEventStdout:
					io.WriteString(a.stdout, ev.Text)
				case api.CodeEventStderr:
					io.WriteString(a.stderr, ev.Text)
				case api.CodeEventResult:
					r := ev.Result
					if r == nil {
						return
					}
					switch {
					case r.PNG != "":
						save("png", r.PNG)
					case r.JPEG != "":
						save("jpg", r.JPEG)
					case r.SVG != "":
						saved++
						p := filepath.Join(outDir, fmt.Sprintf("result-%d.svg", saved))
						if err := os.WriteFile(p, []byte(r.SVG), 0o644); err != nil {
							saveErr = err
						} else {
							fmt.Fprintf(a.stderr, "berth: saved %s\n", p)
						}
					case r.Text != "":
						fmt.Fprintln(a.stdout, r.Text)
					}
				case api.CodeEventError:
					if ev.Error != nil {
						io.WriteString(a.stderr, ev.Error.Traceback)
						if n := len(ev.Error.Traceback); n > 0 && ev.Error.Traceback[n-1] != '\n' {
							io.WriteString(a.stderr, "\n")
						}
					}
				}
			})
			if err != nil {
				return err
			}
			if saveErr != nil {
				return fmt.Errorf("saving results: %w", saveErr)
			}
			if res.Error != nil {
				return exitCode(1)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&lang, "lang", "python", "language of the default context: python, javascript, typescript or bash")
	f.StringVar(&contextID, "context", "", "run in this code context (see the API's code/contexts)")
	f.StringVarP(&file, "file", "f", "", "read the code from this file instead of stdin")
	f.StringVar(&outDir, "out", ".", "directory for image results")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE for this run (repeatable)")
	f.DurationVar(&timeout, "timeout", 0, "interrupt the code after this long, e.g. 30s (default: none)")
	return cmd
}
