import ArgumentParser

/// The options of the JWS that `bind` and `sign` make: the challenge, the issuer, its lifetime, and how long
/// a biometric or device-credential verifier may take.
struct JWSOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The server challenge to sign (bind: makes a binding JWS over it).", valueName: "c"))
    var challenge: String?

    @Option(help: ArgumentHelp("The issuer (`iss`) of the JWS (default: the one given at init, or by `keymgr config set issuer`).", valueName: "iss"))
    var issuer: String?

    @Option(help: ArgumentHelp("Seconds until the JWS expires (default: 60).", valueName: "s"))
    var expiresIn: Int?

    @Option(help: ArgumentHelp(
        "Seconds to wait for the biometric or device-credential verifier before giving up (status 75; default: 60).",
        valueName: "s"))
    var timeout: Double?

    func validate() throws {
        if let expiresIn, expiresIn < 1 { throw ValidationError("--expires-in must be 1 second or more") }
        if let timeout { try DurationOption.check(timeout, "--timeout") }
    }

    /// The options a journey's server decides, with whether each was given (for `JourneyOptions.refuse`).
    var decidedByTheServer: [(String, Bool)] {
        [("--challenge", challenge != nil), ("--expires-in", expiresIn != nil), ("--issuer", issuer != nil),
         ("--timeout", timeout != nil)]
    }
}
