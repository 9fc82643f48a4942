# Prints the fingerprint of every primary key in an OpenPGP public key file (armoured or binary), one per line, upper
# case: what `gpg --with-colons --show-keys FILE` lists as the `fpr` of each `pub` (RFC 4880 section 12.2 for v4
# keys, RFC 9580 section 5.5.4 for v6). Exits non-zero, printing nothing, for a file that is not a key. Run with
# python3 on the node (minimal roots have gpgv but no gpg): by the roles that add a vendor apt repository, through
# lookup('ansible.builtin.file', ...), and by the Lustre client install script, which carries it verbatim. One
# definition: tests/stacks/test_download_integrity.py checks it against gpg.
import base64, hashlib, sys
raw = open(sys.argv[1], 'rb').read()
if raw.lstrip().startswith(b'-----BEGIN PGP PUBLIC KEY BLOCK-----'):
    lines = [line.strip() for line in raw.decode('ascii').strip().splitlines()[1:]]
    end = next(i for i, line in enumerate(lines) if line.startswith('-----END'))
    raw = base64.b64decode(''.join(line for line in lines[lines.index('') + 1:end] if not line.startswith('=')))
i = 0
while i < len(raw):
    c = raw[i]
    if not c & 0x80:
        sys.exit('not an OpenPGP key file')
    if c & 0x40:
        tag, n, i = c & 0x3F, raw[i + 1], i + 2
        if 192 <= n < 224:
            n, i = (n - 192 << 8) + raw[i] + 192, i + 1
        elif n == 255:
            n, i = int.from_bytes(raw[i:i + 4], 'big'), i + 4
        elif n > 223:
            sys.exit('partial packet length in a key file')
    else:
        k = (1, 2, 4, 0)[c & 3]
        if not k:
            sys.exit('indeterminate packet length in a key file')
        tag, n, i = c >> 2 & 0xF, int.from_bytes(raw[i + 1:i + 1 + k], 'big'), i + 1 + k
    body, i = raw[i:i + n], i + n
    if tag == 6:
        v = body[0]
        h = hashlib.sha1(b'\x99' + n.to_bytes(2, 'big') + body) if v == 4 else hashlib.sha256(bytes([0x95 + v]) + n.to_bytes(4, 'big') + body)
        print(h.hexdigest().upper())
