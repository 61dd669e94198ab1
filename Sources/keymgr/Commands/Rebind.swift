import ArgumentParser
import KeyManager

/// `keymgr rebind`: replaces a user's key with a new one (the way back from a locked key or a forgotten PIN).
struct Rebind: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "rebind",
        abstract: "Replace a user's key with a new one, e.g. after a forgotten PIN.",
        usage: "keymgr rebind [<options>] --user <id> [--kid <kid>] --auth-type <type>",
        discussion: """
            Binds a new key with the given auth type and supersedes the old one (queued for deletion on the \
            server at the next sync). With --json: like `bind`. Through the agent, another person's APPLICATION_PIN \
            key is rebound only with its current PIN (asked first: line 1 of --pin-stdin, the new PIN on line 2), \
            unless the policy's rule allows everything.

            Example:
              printf '731905\\n' | keymgr rebind --user alice --auth-type app-pin --pin-stdin
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("The user whose key is replaced.", valueName: "id"),
            completion: .custom(StoreCompletion.users))
    var user: String

    @Option(help: ArgumentHelp("The key to replace, when the user has several.", valueName: "kid"),
            completion: .custom(StoreCompletion.kids))
    var kid: String?

    @Option(help: ArgumentHelp("How the new key is unlocked.", valueName: "type"))
    var authType: AuthTypeArgument

    @OptionGroup(title: "PIN") var pin: PINOptions

    func run(in context: CommandContext) throws {
        let manager = try globals.openManager(in: context)
        let userId = try manager.resolveUser(user)
        let source = pin.source(in: context)
        let result: BindResult
        if try manager.rebindNeedsCurrentPIN(userId: userId, kid: kid) {
            // Another person's PIN key through the agent: its current PIN first (line 1), then the new one (line 2).
            let pins = source.change(for: user, policy: manager.checkNewPIN)
            result = try manager.rebind(userId: userId, kid: kid, authType: authType.authType, newPIN: pins.new,
                                        currentPIN: pins.old)
        } else {
            result = try manager.rebind(userId: userId, kid: kid, authType: authType.authType,
                                        newPIN: source.new(for: user, policy: manager.checkNewPIN))
        }
        try globals.render(BoundKeyOutput(result: result, confirmation: "rebound \(user): new key \(result.key.kid) (\(result.key.authType.rawValue))"), in: context)
    }
}
