import ArgumentParser
import KeyManager

/// `keymgr init`: creates the store, its master key and the device identity.
struct Init: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create a keymgr store for this device.",
        discussion: """
            Creates the home directory (mode 0700), the database and the master key ($KEYMGR_HOME/master.key, \
            mode 0600, unless $CREDENTIALS_DIRECTORY/keymgr.master or KEYMGR_MASTER_KEY_FILE provides one; with \
            --master-key tpm it is sealed to the TPM instead, and $KEYMGR_HOME/master.tpm keeps only the TPM's blob). \
            Fails with status 78 if the home already holds a store: change its settings with `keymgr config \
            set` instead. With --json prints the `status` object.

            Verifier commands are split on spaces into arguments; {osUser} and {userId} are replaced when \
            they run. Exit 0 means verified, 1 rejected, anything else unavailable.

            Example:
              keymgr init --device-name "kiosk 7" --pin-retry 5 \\
                --biometric-verifier "/usr/bin/fprintd-verify {osUser}"
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: "A name for this device, as identity servers will show it (default: the host name).")
    var deviceName: String?

    @Option(help: ArgumentHelp("The default issuer (`iss`) of signed JWS (default: keymgr).", valueName: "iss"))
    var issuer: String?

    @Option(help: ArgumentHelp("Wrong PINs allowed before a key locks (default: 5).", valueName: "n"))
    var pinRetry: Int?

    @Option(help: ArgumentHelp("The shortest PIN accepted (default: 6).", valueName: "n"))
    var pinMinLength: Int?

    @Option(help: ArgumentHelp("Argon2id memory for PINs, in KiB (default: 65536).", valueName: "kib"))
    var argon2Memory: Int?

    @Option(help: ArgumentHelp("Argon2id passes for PINs (default: 3).", valueName: "n"))
    var argon2Iterations: Int?

    @Option(help: ArgumentHelp("Argon2id lanes for PINs (default: 4).", valueName: "n"))
    var argon2Parallelism: Int?

    @Option(help: ArgumentHelp("The command that checks a fingerprint for BIOMETRIC_* keys.", valueName: "cmd"))
    var biometricVerifier: String?

    @Option(help: ArgumentHelp(
        "The device-credential command BIOMETRIC_ALLOW_FALLBACK falls back to (e.g. a PAM helper).", valueName: "cmd"))
    var credentialVerifier: String?

    @Option(help: ArgumentHelp(
        "Where keys live: software, tpm (a TPM 2.0 at --tpm-tcti), or auto (the TPM when one answers, else software; "
            + "`status` says which and why) (default: auto).", valueName: "backend"))
    var keyBackend: KeyBackendChoice?

    @Option(help: ArgumentHelp("The TCTI of the TPM, pinned in the store (default: device:/dev/tpmrm0; swtpm: "
        + "swtpm:path=SOCKET).", valueName: "tcti"))
    var tpmTcti: String?

    @Flag(help: ArgumentHelp("Accept a TCTI over TCP (swtpm:host=…,port=…, mssim:…), which every local user can reach "
        + "(refused without it; prefer swtpm:path=SOCKET in a 0700 directory)."))
    var tpmTctiAllowNetwork = false

    @Option(help: ArgumentHelp("With a TPM: wrong PINs (over all keys) before the TPM locks PIN keys out (default: 32).",
                               valueName: "n"))
    var tpmMaxTries: UInt32?

    @Option(help: ArgumentHelp("With a TPM: seconds after which the TPM forgets one wrong PIN (default: 600).",
                               valueName: "s"))
    var tpmRecoveryTime: UInt32?

    @Option(help: ArgumentHelp("Where the master key lives: file ($KEYMGR_HOME/master.key, mode 0600) or tpm (sealed to "
        + "the TPM at --tpm-tcti, with either key backend: $KEYMGR_HOME/master.tpm holds only the TPM's blob) "
        + "(default: file).", valueName: "where"))
    var masterKey: MasterKeyChoice?

    func validate() throws {
        if let tpmMaxTries, tpmMaxTries < 1 { throw ValidationError("--tpm-max-tries must be 1 or more") }
        if let tpmTcti, tpmTcti.isEmpty { throw ValidationError("--tpm-tcti needs a TCTI, e.g. device:/dev/tpmrm0") }
        for (name, value) in [("--pin-retry", pinRetry), ("--pin-min-length", pinMinLength),
                              ("--argon2-memory", argon2Memory), ("--argon2-iterations", argon2Iterations),
                              ("--argon2-parallelism", argon2Parallelism)] {
            if let value, value < 1 { throw ValidationError("\(name) must be 1 or more") }
        }
        for (name, value) in [("--biometric-verifier", biometricVerifier), ("--credential-verifier", credentialVerifier)] {
            if let value, Self.argv(value).isEmpty { throw ValidationError("\(name) needs a command") }
        }
    }

    func run(in context: CommandContext) throws {
        var options = InitOptions()
        if let deviceName { options.deviceName = deviceName }
        if let issuer { options.issuer = issuer }
        if let pinRetry { options.pinRetry = pinRetry }
        if let pinMinLength { options.pinMinLength = pinMinLength }
        if let argon2Memory { options.argon2.memoryKiB = argon2Memory }
        if let argon2Iterations { options.argon2.iterations = argon2Iterations }
        if let argon2Parallelism { options.argon2.parallelism = argon2Parallelism }
        options.biometricVerifier = biometricVerifier.map(Self.argv)
        options.credentialVerifier = credentialVerifier.map(Self.argv)
        if let keyBackend { options.keyBackend = keyBackend }
        if let tpmTcti { options.tpmTcti = tpmTcti }
        options.tpmTctiAllowNetwork = tpmTctiAllowNetwork
        if let tpmMaxTries { options.tpmMaxTries = tpmMaxTries }
        if let tpmRecoveryTime { options.tpmRecoveryTime = tpmRecoveryTime }
        if let masterKey { options.masterKey = masterKey }

        let console = globals.console(in: context)
        let home = globals.storeHome(in: context)
        console.detail("creating a store in \(home.url.path)")
        let manager = try KeyManager.initialize(home: home, options: options, context: context.request,
                                                environment: context.environment, logger: globals.logger(in: context))
        let status = try manager.status()
        try globals.render(InitOutput(status: status, home: home.url.path), in: context)
    }

    /// A verifier command line as argv: split on spaces, empty pieces dropped.
    static func argv(_ commandLine: String) -> [String] { KeyManager.verifierArgv(commandLine) }
}

extension KeyBackendChoice: ExpressibleByArgument {}
extension MasterKeyChoice: ExpressibleByArgument {}

/// `init`: the `status` object, or one confirmation line.
struct InitOutput: DocumentOutput {
    let status: StoreStatus
    let home: String

    var document: StatusJSON { StatusJSON(status) }

    func text(on console: Console) {
        console.confirm("initialised a keymgr store in \(home) for device \"\(TextTable.printable(status.deviceName))\" (\(status.deviceId)); "
            + "keys: \(status.keyBackend.rawValue) (\(status.keyBackendReason ?? ""))")
    }
}
