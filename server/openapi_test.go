package server

import (
	"bufio"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestRoutesMatchOpenAPI keeps api/openapi.yaml and the route table in
// step: every served route is documented and every documented one served.
func TestRoutesMatchOpenAPI(t *testing.T) {
	f, err := os.Open("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pathRE := regexp.MustCompile(`^  (/v1/\S*):\s*$`)
	methodRE := regexp.MustCompile(`^    (get|put|post|delete|patch):\s*$`)
	var documented []string
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := pathRE.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if !strings.HasPrefix(line, " ") && line != "" {
			cur = ""
		}
		if m := methodRE.FindStringSubmatch(line); m != nil && cur != "" {
			documented = append(documented, strings.ToUpper(m[1])+" "+cur)
		}
	}
	var served []string
	for _, r := range routes {
		served = append(served, r.method+" "+strings.ReplaceAll(r.path, "...}", "}"))
	}
	sort.Strings(documented)
	sort.Strings(served)
	if strings.Join(documented, "\n") != strings.Join(served, "\n") {
		t.Fatalf("openapi.yaml and routes differ:\ndocumented:\n%s\n\nserved:\n%s", strings.Join(documented, "\n"), strings.Join(served, "\n"))
	}
}
