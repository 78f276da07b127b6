package miniotest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"time"
)

// Halt stops the server process and waits for it, but keeps its data
// directory, address and credentials, so that Resume can start the same
// server again: a store outage, as clients meet it (connections refused),
// with nothing lost. kill sends SIGKILL instead of SIGINT (a crash rather
// than a shutdown). Halting a halted server does nothing.
func (s *Server) Halt(kill bool) error {
	s.restart.Lock()
	defer s.restart.Unlock()
	if s.halted || s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	sig := os.Interrupt
	if kill {
		sig = os.Kill
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.waitErr:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.waitErr
	}
	s.halted = true
	return nil
}

// Resume starts a halted server again on the same port, data directory
// and credentials, and waits until it is live. Resuming a running server
// does nothing. Halt, Resume and Stop may be called from any goroutine, one
// at a time.
func (s *Server) Resume(ctx context.Context) error {
	s.restart.Lock()
	defer s.restart.Unlock()
	if !s.halted {
		return nil
	}
	if s.bin == "" {
		return errors.New("miniotest: server was not started by Start")
	}
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	env := s.cmd.Env
	var lastErr error
	// The port was just freed: binding it again can fail for a moment.
	for range 5 {
		cmd := exec.Command(s.bin, s.args...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = logf, logf
		dieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			return err
		}
		s.cmd, s.halted = cmd, false
		go func() { s.waitErr <- cmd.Wait() }()
		limit := s.resumeLimit
		if limit == 0 {
			limit = 30 * time.Second
		}
		if lastErr = s.waitLive(ctx, limit); lastErr == nil {
			return nil
		}
		// It exited (the port still taken) or never got live: stop it and
		// try again.
		_ = cmd.Process.Kill()
		<-s.waitErr
		s.halted = true
		if ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return lastErr
}
