import ArgumentParser
import KeyManager

/// `keymgr pin`: PIN maintenance for APPLICATION_PIN keys.
struct Pin: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pin",
        abstract: "Manage the PIN of an APPLICATION_PIN key.",
        discussion: """
            Example:
              printf '482916\\n731905\\n' | keymgr pin change --user alice --pin-stdin
            """,
        subcommands: [Change.self])

    @OptionGroup var globals: GlobalOptions

    /// `keymgr pin change`: a new PIN for the same key, after the old one is verified.
    struct Change: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "change",
            abstract: "Change a key's PIN (the old PIN is required).",
            usage: "keymgr pin change [<options>] --user <id> [--kid <kid>]",
            discussion: """
                Reads the old PIN, then the new one: two lines with --pin-stdin or --pin-fd, or prompts on the \
                terminal (the new PIN twice). A wrong old PIN counts as a failed attempt. With --json: the key object.

                Example:
                  printf '482916\\n731905\\n' | keymgr pin change --user alice --pin-stdin
                """)

        @OptionGroup var globals: GlobalOptions

        @Option(help: ArgumentHelp("The user whose PIN changes.", valueName: "id"),
                completion: .custom(StoreCompletion.users))
        var user: String

        @Option(help: ArgumentHelp("The key, when the user has several.", valueName: "kid"),
                completion: .custom(StoreCompletion.kids))
        var kid: String?

        @OptionGroup(title: "PIN") var pin: PINOptions

        func run(in context: CommandContext) throws {
            let manager = try globals.openManager(in: context)
            let pins = pin.source(in: context).change(for: user, policy: manager.checkNewPIN)
            let key = try manager.changePIN(userId: try manager.resolveUser(user), kid: kid, oldPIN: pins.old, newPIN: pins.new)
            try globals.render(ChangedKeyOutput(key: key, confirmation: "changed the PIN of \(user)'s key \(key.kid)"), in: context)
        }
    }
}
