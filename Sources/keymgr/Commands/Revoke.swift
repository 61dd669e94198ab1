import ArgumentParser
import KeyManager

/// `keymgr revoke`: revokes keys and destroys their key material.
struct Revoke: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Revoke a user's keys, or one key.",
        discussion: """
            Marks the keys revoked and destroys their private keys; the server learns of it at the next sync. \
            With --json: an array of the revoked key objects.

            Example:
              keymgr revoke --user alice --reason "tablet reported stolen"
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("Revoke this user's keys.", valueName: "id"))
    var user: String?

    @Option(help: ArgumentHelp("Revoke this key.", valueName: "kid"))
    var kid: String?

    @Option(help: ArgumentHelp("Why, for the audit log.", valueName: "reason"))
    var reason: String?

    func validate() throws {
        if user == nil && kid == nil { throw ValidationError("say what to revoke: --user ID or --kid KID") }
    }

    func run() throws {
        let revoked = try globals.openManager().revoke(userId: user, kid: kid, reason: reason)
        let console = globals.console
        if globals.json {
            console.answer(json: .array(revoked.map { .object($0.json) }))
            return
        }
        if revoked.isEmpty { console.confirm("nothing to revoke") }
        for key in revoked { console.confirm("revoked key \(key.kid) of \(key.userId)") }
    }
}
