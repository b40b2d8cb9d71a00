package server

// OverlapsListener exports overlapsListener to the package's external tests.
var OverlapsListener = overlapsListener
