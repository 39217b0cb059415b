// A fork the interpreter knows of: PyOS_BeforeFork before it, PyOS_AfterFork_Child or
// PyOS_AfterFork_Parent after it, with the GIL held across (so no other thread is inside
// the interpreter when the process is copied). Without <Python.h>: callers that only fork
// need not see CPython.
#pragma once

namespace kcoral::cpython {

class ForkScope {
 public:
  ForkScope();  // takes the GIL (nested use is fine), then PyOS_BeforeFork
  ForkScope(const ForkScope&) = delete;
  ForkScope& operator=(const ForkScope&) = delete;
  // Say which side of the fork this is, once, right after it; each releases the GIL.
  // A scope left without either (the fork failed) ends as the parent.
  void in_child();
  void in_parent();
  ~ForkScope();

 private:
  int gil_state_;
  bool ended_ = false;
};

}  // namespace kcoral::cpython
