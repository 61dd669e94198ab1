import ArgumentParser
import KeyManager

/// An `--auth-type` value: `NONE`, `APPLICATION_PIN`, `BIOMETRIC_ONLY`, `BIOMETRIC_ALLOW_FALLBACK`, or
/// `none`, `app-pin`, `biometric-only`, `biometric-allow-fallback`, in any case. Anything else is a usage error.
struct AuthTypeArgument: ExpressibleByArgument {
    let authType: AuthType

    init?(argument: String) {
        guard let authType = AuthType(flag: argument) else { return nil }
        self.authType = authType
    }

    static var allValueStrings: [String] { ["none", "app-pin", "biometric-only", "biometric-allow-fallback"] }

    static var defaultCompletionKind: CompletionKind { .list(allValueStrings) }
}

/// `--bound` (DPoP) or `--unbound`.
enum TokenBindingFlag: String, EnumerableFlag {
    case bound, unbound

    static func help(for value: TokenBindingFlag) -> ArgumentHelp? {
        switch value {
        case .bound: "Ask for DPoP-bound tokens; Bearer tokens are refused."
        case .unbound: "Ask for tokens not bound to a key; no DPoP header is sent."
        }
    }

    var tokenBinding: TokenBinding { self == .bound ? .bound : .unbound }
}
