package api

import (
	"regexp"
	"unicode"
	"unicode/utf8"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Label bounds: sandbox labels (create requests, list filters) and node
// labels (berth serve --node-label) follow one rule, so a label a
// placement constraint names can be written on either.
const (
	MaxLabels     = 64
	MaxLabelKey   = 63
	MaxLabelValue = 256
)

var labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$`)

// ValidateLabels returns an invalid-argument error naming the first label
// that breaks the rule: at most MaxLabels, keys of A-Z a-z 0-9 . _ / -
// that start and end with a letter or digit, values of printable UTF-8.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return errdefs.InvalidArgument("%d labels, max %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if err := ValidateLabel(k, v); err != nil {
			return err
		}
	}
	return nil
}

// ValidateLabel checks one label against ValidateLabels' rule.
func ValidateLabel(k, v string) error {
	if len(k) > MaxLabelKey || !labelKeyRE.MatchString(k) {
		return errdefs.InvalidArgument("invalid label key %q: use up to %d of A-Z a-z 0-9 . _ / -, starting and ending with a letter or digit", k, MaxLabelKey)
	}
	if len(v) > MaxLabelValue || !utf8.ValidString(v) || hasControl(v) {
		return errdefs.InvalidArgument("invalid value for label %q: up to %d printable UTF-8 bytes", k, MaxLabelValue)
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}
