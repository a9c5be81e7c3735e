//! The built-in two-player board games of the arena: tic-tac-toe (3×3, three
//! in a row) and Connect Four (7 columns × 6 rows, four in a row, pieces drop
//! to the lowest free cell). Pure rules: legal moves, the outcome, a text
//! rendering the model reads, and the `move` tool's definition and argument.
//!
//! Players are 0 (`X`, moves first from the empty board) and 1 (`O`).
use serde_json::{json, Value};

/// A game kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Game {
    TicTacToe,
    ConnectFour,
}

impl Game {
    pub fn parse(s: &str) -> Option<Game> {
        match s {
            "tictactoe" | "tic-tac-toe" => Some(Game::TicTacToe),
            "connect4" | "connect-four" | "connectfour" => Some(Game::ConnectFour),
            _ => None,
        }
    }

    /// The name written to `metadata.game` and `data_source`.
    pub fn name(self) -> &'static str {
        match self {
            Game::TicTacToe => "tictactoe",
            Game::ConnectFour => "connect4",
        }
    }

    fn dims(self) -> (usize, usize, usize) {
        // rows, cols, in-a-row
        match self {
            Game::TicTacToe => (3, 3, 3),
            Game::ConnectFour => (6, 7, 4),
        }
    }

    /// Number of distinct moves (cells or columns), numbered 1..=n.
    pub fn move_count(self) -> usize {
        match self {
            Game::TicTacToe => 9,
            Game::ConnectFour => 7,
        }
    }

    /// The argument name of the `move` tool (`cell` or `column`).
    pub fn arg(self) -> &'static str {
        match self {
            Game::TicTacToe => "cell",
            Game::ConnectFour => "column",
        }
    }

    /// The OpenAI definition of the `move` tool, rendered into the system turn.
    pub fn tool_def(self) -> Value {
        let (desc, arg_desc) = match self {
            Game::TicTacToe => (
                "Place your mark on an empty cell of the tic-tac-toe board.",
                "Cell number 1-9, row by row from the top left",
            ),
            Game::ConnectFour => (
                "Drop your piece into a column of the Connect Four board; it falls to the lowest empty cell.",
                "Column number 1-7, from the left",
            ),
        };
        crate::function_def(
            "move",
            desc,
            json!({"type": "object", "properties": {self.arg(): {"type": "integer", "description": arg_desc}}, "required": [self.arg()]}),
        )
    }

    /// The rules, as the prompt states them.
    pub fn rules(self) -> &'static str {
        match self {
            Game::TicTacToe => "We are playing tic-tac-toe on a 3x3 board. Cells are numbered 1-9 row by row from the top left. Players take turns placing their mark (X or O) on an empty cell; three in a row, column or diagonal wins; a full board without a line is a draw.",
            Game::ConnectFour => "We are playing Connect Four on a board of 7 columns and 6 rows. Players take turns dropping a piece (X or O) into a column numbered 1-7; it falls to the lowest empty cell. Four in a row horizontally, vertically or diagonally wins; a full board without a line is a draw.",
        }
    }
}

/// The mark of a player.
pub fn mark(player: usize) -> char {
    if player == 0 {
        'X'
    } else {
        'O'
    }
}

/// A position: cells row-major from the top left; 0 empty, 1 = X, 2 = O.
#[derive(Debug, Clone, PartialEq)]
pub struct Board {
    pub game: Game,
    pub cells: Vec<u8>,
    /// Moves played so far (1-based move numbers).
    pub moves: Vec<u32>,
}

/// How a game ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Win(usize),
    Draw,
}

impl Board {
    pub fn new(game: Game) -> Board {
        let (r, c, _) = game.dims();
        Board { game, cells: vec![0; r * c], moves: Vec::new() }
    }

    /// The player to move.
    pub fn to_move(&self) -> usize {
        self.moves.len() % 2
    }

    /// Why move `m` (1-based) is illegal now, or the cell it fills.
    pub fn check(&self, m: i64) -> Result<usize, String> {
        let (rows, cols, _) = self.game.dims();
        let n = self.game.move_count() as i64;
        if m < 1 || m > n {
            return Err(format!("{} {m} does not exist (1-{n})", self.game.arg()));
        }
        match self.game {
            Game::TicTacToe => {
                let i = (m - 1) as usize;
                if self.cells[i] != 0 {
                    return Err(format!("cell {m} is already taken by {}", mark(self.cells[i] as usize - 1)));
                }
                Ok(i)
            }
            Game::ConnectFour => {
                let c = (m - 1) as usize;
                (0..rows)
                    .rev()
                    .map(|r| r * cols + c)
                    .find(|&i| self.cells[i] == 0)
                    .ok_or_else(|| format!("column {m} is full"))
            }
        }
    }

    /// Plays move `m` for the player to move.
    pub fn play(&mut self, m: i64) -> Result<(), String> {
        let i = self.check(m)?;
        self.cells[i] = self.to_move() as u8 + 1;
        self.moves.push(m as u32);
        Ok(())
    }

    pub fn legal_moves(&self) -> Vec<i64> {
        (1..=self.game.move_count() as i64).filter(|&m| self.check(m).is_ok()).collect()
    }

    /// The outcome when the game is over.
    pub fn outcome(&self) -> Option<Outcome> {
        let (rows, cols, k) = self.game.dims();
        let at = |r: isize, c: isize| -> u8 {
            if r < 0 || c < 0 || r >= rows as isize || c >= cols as isize {
                0
            } else {
                self.cells[r as usize * cols + c as usize]
            }
        };
        for r in 0..rows as isize {
            for c in 0..cols as isize {
                let p = at(r, c);
                if p == 0 {
                    continue;
                }
                for (dr, dc) in [(0, 1), (1, 0), (1, 1), (1, -1)] {
                    if (1..k as isize).all(|s| at(r + s * dr, c + s * dc) == p) {
                        return Some(Outcome::Win(p as usize - 1));
                    }
                }
            }
        }
        if self.cells.iter().all(|&x| x != 0) {
            return Some(Outcome::Draw);
        }
        None
    }

    /// The board as the model sees it: one line per row; tic-tac-toe shows
    /// free cells by number, Connect Four shows `.` and a column header.
    pub fn render(&self) -> String {
        let (rows, cols, _) = self.game.dims();
        let mut s = String::new();
        if self.game == Game::ConnectFour {
            s += &(1..=cols).map(|c| c.to_string()).collect::<Vec<_>>().join(" ");
            s.push('\n');
        }
        for r in 0..rows {
            let row: Vec<String> = (0..cols)
                .map(|c| {
                    let i = r * cols + c;
                    match (self.cells[i], self.game) {
                        (0, Game::TicTacToe) => (i + 1).to_string(),
                        (0, Game::ConnectFour) => ".".to_string(),
                        (p, _) => mark(p as usize - 1).to_string(),
                    }
                })
                .collect();
            s += &row.join(" ");
            s.push('\n');
        }
        s
    }
}

/// Reads the `move` tool's argument (an integer, or a string holding one).
pub fn move_arg(game: Game, arguments: &Value) -> Result<i64, String> {
    let key = game.arg();
    match arguments.get(key) {
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| format!("`{key}` must be a whole number")),
        Some(Value::String(s)) => s.trim().parse().map_err(|_| format!("`{key}` must be a whole number, got `{s}`")),
        Some(_) => Err(format!("`{key}` must be a whole number")),
        None => Err(format!("the `move` call needs `{key}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tictactoe_lines_draws_and_illegal_moves() {
        let mut b = Board::new(Game::TicTacToe);
        for m in [1, 4, 2, 5] {
            b.play(m).unwrap();
        }
        assert_eq!(b.outcome(), None);
        assert!(b.play(4).unwrap_err().contains("taken by O"));
        assert!(b.play(10).is_err());
        b.play(3).unwrap();
        assert_eq!(b.outcome(), Some(Outcome::Win(0)));
        let mut d = Board::new(Game::TicTacToe);
        for m in [1, 2, 3, 5, 4, 6, 8, 7, 9] {
            d.play(m).unwrap();
        }
        assert_eq!(d.outcome(), Some(Outcome::Draw));
        assert_eq!(d.render(), "X O X\nX O O\nO X X\n");
    }

    #[test]
    fn connect_four_drops_and_diagonals() {
        let mut b = Board::new(Game::ConnectFour);
        // X builds the diagonal 1..4 from the bottom left.
        for m in [1, 2, 2, 3, 3, 4, 3, 4, 4, 7, 4] {
            b.play(m).unwrap();
        }
        assert_eq!(b.outcome(), Some(Outcome::Win(0)));
        let mut f = Board::new(Game::ConnectFour);
        for _ in 0..6 {
            f.play(1).unwrap();
        }
        assert_eq!(f.check(1).unwrap_err(), "column 1 is full");
        assert_eq!(f.legal_moves(), vec![2, 3, 4, 5, 6, 7]);
        assert!(f.render().starts_with("1 2 3 4 5 6 7\nO . . ."));
    }
}
