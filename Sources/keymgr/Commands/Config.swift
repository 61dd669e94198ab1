import ArgumentParser
import KeyManager

/// `keymgr config`: the settings `init` chose, shown and changed.
struct Config: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Show or change the settings `init` chose.",
        discussion: """
            Example:
              keymgr config show
              keymgr config set biometric-verifier "/usr/bin/fprintd-verify {osUser}"
            """,
        subcommands: [Show.self, Set.self])

    @OptionGroup var globals: GlobalOptions

    /// `keymgr config show`.
    struct Show: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "Show the store's settings.",
            discussion: """
                One line per setting, named as `config set` takes it. With --json: {"deviceName", "issuer", \
                "pinRetry", "pinMinLength", "argon2Memory", "argon2Iterations", "argon2Parallelism", \
                "biometricVerifier", "credentialVerifier"} (a verifier as its argv, or null).

                Example:
                  keymgr config show --json
                """)

        @OptionGroup var globals: GlobalOptions

        func run(in context: CommandContext) throws {
            let config = try globals.openManager(in: context, readOnly: true).config()
            try globals.render(ConfigOutput(config: config), in: context)
        }
    }

    /// `keymgr config set KEY VALUE`.
    struct Set: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Change one setting `init` chose.",
            usage: "keymgr config set <key> <value> [<options>]",
            discussion: """
                KEY is init's option without the dashes: \(ConfigKey.allCases.map(\.rawValue).joined(separator: ", ")). \
                The rules are init's (pin-retry 1 to 10, pin-min-length 4 to 64, a verifier an absolute path); \
                Argon2 costs only go up. A verifier is removed with the value `none`. New keys and PINs use the \
                new values; an existing PIN moves to a higher Argon2 cost at its next successful unlock and keeps \
                its retry limit. The change is audited as config.changed. With --json prints the `config show` \
                object.

                Example:
                  keymgr config set pin-min-length 8
                  keymgr config set credential-verifier /usr/lib/keymgr/pam-check
                """)

        @OptionGroup var globals: GlobalOptions

        @Argument(help: ArgumentHelp("The setting: \(ConfigKey.allCases.map(\.rawValue).joined(separator: ", ")).", valueName: "key"))
        var key: String

        @Argument(help: ArgumentHelp("Its new value.", valueName: "value"))
        var value: String

        func validate() throws {
            guard ConfigKey(rawValue: key) != nil else {
                throw ValidationError("unknown setting '\(key)': one of \(ConfigKey.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }

        func run(in context: CommandContext) throws {
            guard let key = ConfigKey(rawValue: key) else { throw CommandFailure(.usage, "unknown setting '\(key)'") }
            let config = try globals.openManager(in: context).setConfig(key, to: value)
            try globals.render(ConfigOutput(config: config, setKey: key), in: context)
        }
    }

}

/// `config show` and `config set`: `ConfigJSON`, or (show) aligned `key  value` lines or (set) one confirmation line.
struct ConfigOutput: DocumentOutput {
    let config: StoreConfig
    /// Set for `config set`: the setting just changed.
    var setKey: ConfigKey?

    var document: ConfigJSON { ConfigJSON(config) }

    func text(on console: Console) {
        if let setKey {
            console.confirm("set \(setKey.rawValue) to \(config.values.first { $0.key == setKey }?.value ?? "none")")
            return
        }
        let values = config.values
        let width = values.map(\.key.rawValue.count).max() ?? 0
        console.answer(values.map {
            $0.key.rawValue + String(repeating: " ", count: width - $0.key.rawValue.count + 2) + TextTable.printable($0.value ?? "none")
        }.joined(separator: "\n"))
    }
}

/// `config show --json`.
struct ConfigJSON: Encodable {
    let deviceName: String
    let issuer: String
    let pinRetry: Int
    let pinMinLength: Int
    let argon2Memory: Int
    let argon2Iterations: Int
    let argon2Parallelism: Int
    @Nullable var biometricVerifier: [String]?
    @Nullable var credentialVerifier: [String]?

    init(_ config: StoreConfig) {
        deviceName = config.deviceName
        issuer = config.issuer
        pinRetry = config.pinRetry
        pinMinLength = config.pinMinLength
        argon2Memory = config.argon2.memoryKiB
        argon2Iterations = config.argon2.iterations
        argon2Parallelism = config.argon2.parallelism
        biometricVerifier = config.biometricVerifier
        credentialVerifier = config.credentialVerifier
    }
}
