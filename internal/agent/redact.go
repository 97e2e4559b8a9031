package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"

	"github.com/winnet-io/winnet/internal/ovs/ovsdb"
)

// secretKeyWords say which keys hold a secret: a key (of an OVSDB map, a JSON field, a log's
// key=value) whose name, in any case, contains one of them has its value redacted. It is the one
// list: secretKey (the maps the bundle dumps) and Redact (text) both read it. OVS's IPsec keys
// (psk, certificate, private_key, remote_cert) are in; the tunnel's key, in_key and out_key (its
// VNIs, needed to debug) contain none of the words and are kept.
var secretKeyWords = []string{
	"psk", "password", "passwd", "secret", "token", "credential", "cert", "private",
	"key-data", "key_data", "api-key", "api_key", "apikey",
}

// redactedValue replaces a secret key's value.
const redactedValue = "[REDACTED]"

// secretKey reports whether the value of key is a secret (secretKeyWords).
func secretKey(key string) bool {
	key = strings.ToLower(key)
	for _, w := range secretKeyWords {
		if strings.Contains(key, w) {
			return true
		}
	}
	return false
}

// What Redact replaces: PEM blocks (keys, certificates; also escaped inside JSON strings) and
// their base64 form (kubeconfig's *-data), JSON Web Tokens (service account and bound tokens),
// bearer credentials, and the value of every key or field whose name says it holds a secret
// (secretKeyWords).
var (
	redactPEM     = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]{1,64}-----.*?-----END [A-Z0-9 ]{1,64}-----`)
	redactPEM64   = regexp.MustCompile(`LS0tLS1CRUdJT[A-Za-z0-9+/=]*`)
	redactJWT     = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`)
	redactBearer  = regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}`)
	redactKeyword = regexp.MustCompile(`(?i)("?[A-Za-z0-9_.-]*(?:` + keywordAlternation() + `)[A-Za-z0-9_.-]*"?\s*[:=]\s*)("(?:[^"\\]|\\.)*"|'[^']*'|[^\s,}\]]+)`)
)

func keywordAlternation() string {
	quoted := make([]string, len(secretKeyWords))
	for i, w := range secretKeyWords {
		quoted[i] = regexp.QuoteMeta(w)
	}
	return strings.Join(quoted, "|")
}

// Redact replaces credentials in data with [REDACTED].
func Redact(data []byte) []byte {
	data = redactPEM.ReplaceAll(data, []byte("[REDACTED PEM]"))
	data = redactPEMEnds(data)
	data = redactPEM64.ReplaceAll(data, []byte("[REDACTED PEM]"))
	data = redactJWT.ReplaceAll(data, []byte("[REDACTED TOKEN]"))
	data = redactBearer.ReplaceAll(data, []byte("${1}[REDACTED]"))
	return redactKeyword.ReplaceAll(data, []byte(`${1}"`+redactedValue+`"`))
}

// redactPEMEnds replaces what is left of a PEM block cut by the start or the end of data (a log's
// tail begins anywhere): everything up to an END line before any BEGIN, and everything from a BEGIN
// line that no END follows.
func redactPEMEnds(data []byte) []byte {
	begin, end := []byte("-----BEGIN "), []byte("-----END ")
	if e := bytes.Index(data, end); e >= 0 {
		if b := bytes.Index(data, begin); b < 0 || b > e {
			stop := e + len(end)
			if n := bytes.Index(data[stop:], []byte("-----")); n >= 0 {
				stop += n + len("-----")
			} else {
				stop = len(data)
			}
			data = append([]byte("[REDACTED PEM]"), data[stop:]...)
		}
	}
	if b := bytes.LastIndex(data, begin); b >= 0 && !bytes.Contains(data[b:], end) {
		data = append(data[:b:b], []byte("[REDACTED PEM]")...)
	}
	return data
}

// ovsdbJSON renders OVSDB's rows for the bundle, every map of them (options, other_config,
// external_ids, status...) redacted by key first: whatever a key looks like (a space, a colon), its
// value does not rely on Redact's text patterns.
func ovsdbJSON(s ovsdb.Snapshot) ([]byte, error) {
	redactMaps(&s)
	return json.MarshalIndent(s, "", "  ")
}

// redactMaps replaces, in every map of strings to strings that v (a pointer) reaches through
// pointers, structs, slices and arrays, the value of each secret key (secretKey) with
// redactedValue. Such a map, and every slice on the way, is replaced by a redacted copy, so that
// what v was given (a client's cache holds it) is left alone.
func redactMaps(v any) {
	redactValue(reflect.ValueOf(v))
}

func redactValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			redactValue(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			redactValue(v.Field(i))
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && !v.IsNil() && v.CanSet() {
			copied := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			reflect.Copy(copied, v)
			v.Set(copied) // the rows given share their array with the caller's
		}
		for i := range v.Len() {
			redactValue(v.Index(i))
		}
	case reflect.Map:
		t := v.Type()
		if v.IsNil() || !v.CanSet() || t.Key().Kind() != reflect.String || t.Elem().Kind() != reflect.String {
			return
		}
		out := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			value := it.Value()
			if secretKey(it.Key().String()) {
				value = reflect.ValueOf(redactedValue).Convert(t.Elem())
			}
			out.SetMapIndex(it.Key(), value)
		}
		v.Set(out)
	}
}
