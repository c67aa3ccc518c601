package agent

import (
	"net/http"

	"github.com/berth-sh/berth/internal/errdefs"
)

// fileScope is who acts in a file call and where its relative paths start.
//
//	?user=NAME     the acting user: relative paths start in that user's
//	               home (root's is /root), and files and directories the
//	               call creates belong to that user.
//	?session=ID    relative paths start in the session's current working
//	               directory (its shell's cwd), and the
//	               session's user acts unless user is given as well.
//
// Neither: the sandbox's default user, from its home.
type fileScope struct {
	acct account
	base string // absolute directory relative paths are joined to
}

func (s *Server) fileScope(r *http.Request) (fileScope, error) {
	q := r.URL.Query()
	user := q.Get("user")
	if id := q.Get("session"); id != "" {
		cwd, acct, err := s.sessionCwd(id)
		if err != nil {
			return fileScope{}, err
		}
		if user != "" {
			if acct, err = lookupUser(s.cfg.EtcDir, user); err != nil {
				return fileScope{}, err
			}
		}
		return fileScope{acct: acct, base: cwd}, nil
	}
	acct, err := s.resolveUser(user)
	if err != nil {
		return fileScope{}, err
	}
	return fileScope{acct: acct, base: acct.home}, nil
}

// sessionCwd is where relative paths of a call naming session id start,
// and the session's user: its shell's directory after its last command
// (the shell reports it, see shell.go), or where a new shell would start.
func (s *Server) sessionCwd(id string) (string, account, error) {
	if s.procs == nil {
		return "", account{}, errdefs.NotFound("no session %q", id)
	}
	sess, err := s.procs.session(id)
	if err != nil {
		return "", account{}, err
	}
	cwd := sess.info().Cwd
	if cwd == "" || cwd[0] != '/' {
		return "", account{}, errdefs.FailedPrecondition("session %s has no absolute working directory", id)
	}
	return cwd, sess.acct, nil
}
