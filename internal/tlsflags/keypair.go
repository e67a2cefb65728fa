package tlsflags

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"
)

// expiryWarning is how long before its certificate expires a listener
// starts to warn, and expiryRecheck how often it looks while running.
const (
	expiryWarning = 14 * 24 * time.Hour
	expiryRecheck = time.Hour
)

// keyPair serves a certificate and key from files, reading them again
// when either file's modification time changes (checked at most once a
// second, at a handshake), so a rotated certificate is served without a
// restart. A pair that fails to load (say, the certificate written but
// not yet its key) is skipped: the previous one stays in use until the
// files agree again. Each load is logged, with the certificate's expiry;
// a failed reload at ERROR, once per change of the files; and a
// certificate that has expired, or expires within expiryWarning, at WARN
// at its load and then hourly. An operator rotating certificates could
// not tell from the log whether the new one was served, and an expired
// or mismatched one was served or skipped in silence (found by a tester).
type keyPair struct {
	certFile, keyFile string
	log               *slog.Logger

	mu          sync.Mutex
	cert        *tls.Certificate
	stamp       [2]time.Time
	failedStamp [2]time.Time // the files' stamps when a reload last failed
	checkedAt   time.Time
	expiryAt    time.Time // when the expiry was last checked
}

func newKeyPair(certFile, keyFile string, log *slog.Logger) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile, log: log}
	stamp, err := kp.stamps()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	kp.cert, kp.stamp, kp.checkedAt = &cert, stamp, now
	kp.loaded("TLS certificate loaded", now)
	return kp, nil
}

func (kp *keyPair) stamps() ([2]time.Time, error) {
	var out [2]time.Time
	for i, p := range []string{kp.certFile, kp.keyFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return out, err
		}
		out[i] = fi.ModTime()
	}
	return out, nil
}

func (kp *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if now := time.Now(); now.Sub(kp.checkedAt) >= time.Second {
		kp.checkedAt = now
		kp.reload(now)
		if now.Sub(kp.expiryAt) >= expiryRecheck {
			kp.checkExpiry(now)
		}
	}
	if kp.cert == nil {
		return nil, errors.New("no server certificate")
	}
	return kp.cert, nil
}

// reload loads the files again if they changed; kp.mu is held.
func (kp *keyPair) reload(now time.Time) {
	stamp, err := kp.stamps()
	if err != nil || stamp == kp.stamp {
		return
	}
	cert, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		if stamp != kp.failedStamp {
			kp.failedStamp = stamp
			kp.log.Error("TLS certificate files changed but do not load; the previous certificate stays in use until they do",
				slog.String("cert", kp.certFile), slog.String("key", kp.keyFile), slog.Any("error", err))
		}
		return
	}
	kp.cert, kp.stamp = &cert, stamp
	kp.loaded("TLS certificate reloaded", now)
}

// loaded logs the certificate just loaded, and checks its expiry.
func (kp *keyPair) loaded(msg string, now time.Time) {
	if leaf := kp.cert.Leaf; leaf != nil {
		kp.log.Info(msg, slog.String("cert", kp.certFile), slog.String("subject", leaf.Subject.String()),
			slog.String("serial", leaf.SerialNumber.Text(16)), slog.Time("not_after", leaf.NotAfter))
	}
	kp.checkExpiry(now)
}

// checkExpiry warns if the certificate served has expired or expires
// soon.
func (kp *keyPair) checkExpiry(now time.Time) {
	kp.expiryAt = now
	leaf := kp.cert.Leaf
	if leaf == nil {
		return
	}
	switch left := leaf.NotAfter.Sub(now); {
	case left <= 0:
		kp.log.Warn("TLS certificate has expired: clients refuse it; write a new one over the files (it is read again within a second)",
			slog.String("cert", kp.certFile), slog.Time("not_after", leaf.NotAfter))
	case left < expiryWarning:
		kp.log.Warn("TLS certificate expires soon: write a new one over the files (it is read again within a second)",
			slog.String("cert", kp.certFile), slog.Time("not_after", leaf.NotAfter), slog.Duration("left", left.Round(time.Minute)))
	}
}
