package httpapi

import (
	"net/http/httptest"
	"testing"
)

func TestKeyringLookup(t *testing.T) {
	t.Parallel()
	const secret = "ops-secret-7f3a9c1d2e4b5a60"
	k, err := newKeyring([]Token{{Name: "ops", Role: RoleOperator, Hash: HashSecret(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		secret string
		ok     bool
	}{
		{"OK", secret, true},
		{"ErrLastByte", secret[:len(secret)-1] + "1", false},
		{"ErrPrefix", secret[:8], false},
		{"ErrLonger", secret + "x", false},
		{"ErrEmpty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tok, ok := k.lookup(tt.secret)
			if ok != tt.ok || ok && tok.Name != "ops" {
				t.Fatalf("lookup = %v, %v; want ok %v", tok, ok, tt.ok)
			}
		})
	}
	// The map finds entries by hash; the constant-time compare of the
	// hashes is what believes a token. An entry filed under a hash that is
	// not its token's (a broken map) is refused.
	t.Run("ErrMisfiledEntry", func(t *testing.T) {
		t.Parallel()
		bad := keyring{byHash: map[[32]byte]*Token{
			HashSecret("attacker-guess-0123456789"): {Name: "ops", Role: RoleOperator, Hash: HashSecret(secret)},
		}}
		if tok, ok := bad.lookup("attacker-guess-0123456789"); ok {
			t.Fatalf("lookup believed a token whose hash does not match: %v", tok)
		}
	})
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header []string
		secret string
		found  bool
		bad    bool
	}{
		{"OK", []string{"Bearer abc.DEF-123"}, "abc.DEF-123", true, false},
		{"SchemeCaseOK", []string{"bearer abc"}, "abc", true, false},
		{"Missing", nil, "", false, false},
		{"ErrBasic", []string{"Basic abc"}, "", true, true},
		{"ErrNoToken", []string{"Bearer "}, "", true, true},
		{"ErrNoSpace", []string{"Bearerabc"}, "", true, true},
		{"ErrInnerSpace", []string{"Bearer abc def"}, "", true, true},
		{"ErrTwoHeaders", []string{"Bearer abc", "Bearer def"}, "", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/v1/plans", nil)
			for _, h := range tt.header {
				r.Header.Add("Authorization", h)
			}
			secret, found, err := bearerToken(r)
			if secret != tt.secret || found != tt.found || (err != nil) != tt.bad {
				t.Fatalf("bearerToken = %q, %v, %v; want %q, %v, bad %v", secret, found, err, tt.secret, tt.found, tt.bad)
			}
		})
	}
}

func TestNoneMatch(t *testing.T) {
	t.Parallel()
	const etag = `"abc"`
	tests := []struct {
		name   string
		values []string
		match  bool
	}{
		{"ExactOK", []string{`"abc"`}, true},
		{"WeakOK", []string{`W/"abc"`}, true},
		{"ListOK", []string{`"x", "abc"`}, true},
		{"SecondHeaderOK", []string{`"x"`, `"abc"`}, true},
		{"StarOK", []string{`*`}, true},
		{"Other", []string{`"abd"`}, false},
		{"Unquoted", []string{`abc`}, false},
		{"None", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := noneMatch(tt.values, etag); got != tt.match {
				t.Fatalf("noneMatch(%q) = %v, want %v", tt.values, got, tt.match)
			}
		})
	}
}
