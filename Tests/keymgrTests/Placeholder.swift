import XCTest

final class PlaceholderkeymgrTests: XCTestCase {}
