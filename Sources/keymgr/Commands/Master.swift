import ArgumentParser
import KeyManager

/// `keymgr master`: the master key that wraps every secret in the store.
struct Master: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "master",
        abstract: "Manage the store's master key.",
        discussion: """
            Example:
              keymgr master rotate
            """,
        subcommands: [Rotate.self])

    @OptionGroup var globals: GlobalOptions

    /// `keymgr master rotate`: a new master key, every secret re-wrapped in one transaction.
    struct Rotate: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate",
            abstract: "Replace the master key and re-wrap every secret under the new one.",
            usage: "keymgr master rotate [<options>] [--yes]",
            discussion: """
                All secrets are re-wrapped in one transaction: either all move to the new key or none do. On a \
                terminal keymgr asks first (--yes does not ask). With --json: {"secretsRewrapped"}.

                Example:
                  keymgr master rotate --json
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var confirmation: ConfirmationOptions

        func run(in context: CommandContext) throws {
            let manager = try globals.openManager(in: context)
            try manager.checkMasterKeyRotatable()  // a key systemd holds fails (78) before anything is asked
            try confirmation.confirm("Replace the master key and re-wrap every secret under a new one?", in: context)
            let rotation = try manager.rotateMasterKey()
            try globals.render(RotationOutput(secretsRewrapped: rotation.secretsRewrapped), in: context)
        }
    }
}

/// `master rotate`: `{"secretsRewrapped"}`, or one confirmation line.
struct RotationOutput: DocumentOutput {
    let secretsRewrapped: Int

    var document: RotationJSON { RotationJSON(secretsRewrapped: secretsRewrapped) }

    func text(on console: Console) { console.confirm("rotated the master key: \(secretsRewrapped) secrets re-wrapped") }
}
