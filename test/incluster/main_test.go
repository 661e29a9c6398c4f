package incluster

import (
	"testing"

	"github.com/skewgate/skewgate/test/netns"
)

func TestMain(m *testing.M) { netns.Main(m) }
