import KeyManager

/// An error the CLI itself reports: an option combination or input it refuses, a terminal it cannot ask on, a
/// confirmation declined. The library's rules throw the library's errors; this is only for the command line's own.
///
/// It is a `KeymgrFailure` like the library's, so it reaches the person the same way: the same exit-code table,
/// `keymgr: <message>` on stderr, `{"error":{"code","message"}}` with `--json`. Messages never contain a secret.
struct CommandFailure: KeymgrFailure {
    let code: FailureCode
    let message: String

    init(_ code: FailureCode, _ message: String) {
        self.code = code
        self.message = message
    }
}
