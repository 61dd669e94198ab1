import ArgumentParser
import KeyManager

/// `keymgr revoke`: revokes keys and destroys their key material.
struct Revoke: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Revoke a user's keys, or one key.",
        usage: "keymgr revoke [<options>] (--user <id> | --kid <kid>)",
        discussion: """
            Marks the keys revoked and destroys their private keys; the server learns of it at the next sync. \
            On a terminal keymgr asks first (--yes does not ask; no exits 1, code declined); without one it \
            never asks; a user or key that does not exist fails (66) before anything is asked. With --json: an \
            array of the revoked key objects. Through the agent, another person's APPLICATION_PIN key is revoked \
            only with its PIN (--pin-stdin, --pin-fd or the terminal), unless the policy's rule allows everything.

            Example:
              keymgr revoke --user alice --reason "tablet reported stolen"
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("Revoke this user's keys.", valueName: "id"), completion: .custom(StoreCompletion.users))
    var user: String?

    @Option(help: ArgumentHelp("Revoke this key.", valueName: "kid"), completion: .custom(StoreCompletion.kids))
    var kid: String?

    @Option(help: ArgumentHelp("Why, for the audit log.", valueName: "reason"))
    var reason: String?

    @OptionGroup var confirmation: ConfirmationOptions

    /// Through the agent, revoking another person's PIN key needs its PIN (unless an administrator's rule allows
    /// everything): read only then.
    @OptionGroup(title: "PIN") var pin: PINOptions

    func validate() throws {
        if user == nil && kid == nil { throw ValidationError("say what to revoke: --user ID or --kid KID") }
    }

    func run(in context: CommandContext) throws {
        let manager = try globals.openManager(in: context)
        let userId = try manager.resolveUser(user)
        // The target is found first: a missing user or key fails (66) before anything is asked.
        let targets = try manager.revocationTargets(userId: userId, kid: kid)
        let named = targets.count == 1 ? "key \(targets[0].kid) of \(targets[0].userId)"
            : "the \(targets.count) keys of \(targets[0].userId)"
        try confirmation.confirm("Revoke \(named) and destroy its key material?", in: context)
        let revoked = try manager.revoke(userId: userId, kid: kid, reason: reason,
                                         pin: pin.source(in: context).current(for: targets[0].userId))
        try globals.render(RevokedKeysOutput(keys: revoked), in: context)
    }
}

/// `revoke`: the revoked keys' objects, or one line per key (or that there was nothing to revoke).
struct RevokedKeysOutput: DocumentOutput {
    let keys: [UserKey]

    var document: [KeyJSON] { keys.map { KeyJSON($0) } }

    func text(on console: Console) {
        if keys.isEmpty { console.confirm("nothing to revoke") }
        for key in keys { console.confirm("revoked key \(key.kid) of \(key.userId)") }
    }
}
